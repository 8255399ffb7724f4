"""A search method rebuilt from its stored state carries on as if it had never stopped."""

from __future__ import annotations

import json

import pytest

from det_airflow.config._types import Length
from det_airflow.searcher import (
    ExitedReason,
    SearcherError,
    Shutdown,
    load_search_method,
    make_search_method,
)

from .conftest import FakeMaster, RungMaster

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


ASHA_EARLY = {3: ExitedReason.INVALID_HP, 5: ExitedReason.ERRORED, 9: ExitedReason.USER_CANCELED}
ASHA_CASES = [
    ("adaptive_asha", {"max_trials": 24, "divisor": 3, "max_concurrent_trials": 4}),
    ("adaptive_asha", {"max_trials": 24, "divisor": 3, "max_concurrent_trials": 0, "stop_once": False}),
    ("adaptive_asha", {"max_trials": 12, "mode": "conservative", "max_concurrent_trials": 2}),
    ("async_halving", {"max_trials": 20, "num_rungs": 3, "divisor": 2, "smaller_is_better": False}),
    ("async_halving", {"max_trials": 20, "num_rungs": 3, "divisor": 2, "stop_once": False}),
]


def _asha_master(config, method):
    points = sorted({p for b in method.brackets for p in b.units} | {10, 500})
    return RungMaster(method, points, early=dict(ASHA_EARLY))


@pytest.mark.parametrize(("name", "fields"), ASHA_CASES)
@pytest.mark.parametrize("stop_after", [0, 1, 7, 30])
def test_resumed_asha_search_emits_the_same_actions(make_config, name, fields, stop_after):
    config = make_config(name, max_length=Length("batches", 900), **fields)
    uninterrupted = _asha_master(config, make_search_method(config)).start().run()

    resumed = _asha_master(config, make_search_method(config)).start().run(stop_after)
    state = json.loads(json.dumps(resumed.method.state_dict(), allow_nan=False))
    resumed.method = load_search_method(config, state)
    resumed.run()

    assert resumed.actions == uninterrupted.actions
    assert resumed.actions[-1] == Shutdown()
    assert resumed.method.state_dict() == uninterrupted.method.state_dict()
    assert resumed.method.progress() == uninterrupted.method.progress() == 1.0


def test_asha_state_of_another_bracket_plan_is_refused(make_config):
    config = make_config("adaptive_asha", max_trials=16, max_length=Length("batches", 937))
    state = make_search_method(config).state_dict()
    other = make_config("adaptive_asha", max_trials=16, max_length=Length("batches", 937), mode="aggressive")
    with pytest.raises(SearcherError, match="brackets"):
        load_search_method(other, state)
