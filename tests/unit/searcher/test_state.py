"""A search method rebuilt from its stored state carries on as if it had never stopped."""

from __future__ import annotations

import json

import pytest

from det_airflow.searcher import ExitedReason, SearcherError, load_search_method, make_search_method

from .conftest import FakeMaster

EARLY = {3: ExitedReason.INVALID_HP, 5: ExitedReason.ERRORED, 6: ExitedReason.USER_CANCELED}
CASES = [
    ("single", {}),
    ("random", {"max_trials": 8, "max_concurrent_trials": 3}),
    ("random", {"max_trials": 8, "max_concurrent_trials": 0}),
    ("grid", {"max_concurrent_trials": 3}),
]


@pytest.mark.parametrize(("name", "fields"), CASES)
@pytest.mark.parametrize("stop_after", [0, 1, 4])
def test_resumed_search_emits_the_same_actions(make_config, name, fields, stop_after):
    config = make_config(name, **fields)
    uninterrupted = FakeMaster(make_search_method(config), early=EARLY).start().run()

    resumed = FakeMaster(make_search_method(config), early=EARLY).start().run(stop_after)
    state = json.loads(json.dumps(resumed.method.state_dict()))
    resumed.method = load_search_method(config, state)
    resumed.run()

    assert resumed.actions == uninterrupted.actions
    assert resumed.method.state_dict() == uninterrupted.method.state_dict()
    assert resumed.method.progress() == uninterrupted.method.progress() == 1.0


def test_resume_after_shutdown_emits_nothing_more(make_config):
    config = make_config("random", max_trials=2)
    master = FakeMaster(make_search_method(config)).start().run()
    method = load_search_method(config, json.loads(json.dumps(master.method.state_dict())))
    assert method.trial_exited(1) == [] and method.trial_exited(2) == []


def test_state_of_another_method_is_refused(make_config):
    state = make_search_method(make_config("grid")).state_dict()
    with pytest.raises(SearcherError, match="does not fit searcher 'random'"):
        load_search_method(make_config("random", max_trials=2), state)
