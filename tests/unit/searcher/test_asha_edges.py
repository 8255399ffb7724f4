"""ASHA at its edges: the exact refusals, a length of one unit, the concurrency each config gets,
how a trial's end reaches the sampler's model, repeated end reports, a stopped trial that then
errors, closed trials promoted up to the top rung, and the stored state mid-search."""

from __future__ import annotations

import json

import pytest

from det_airflow.config._types import DoubleHP, Length
from det_airflow.searcher import (
    AsyncHalvingSearch,
    ExitedReason,
    SearcherError,
    concurrent_slot_count,
    make_search_method,
)
from det_airflow.searcher._rung import WORST, unpack

from .conftest import asha_config, said, validation_loss

L100 = Length("batches", 100)
ONE_HP = {"lr": DoubleHP(0.0, 1.0)}


def _config(make_config, **fields):
    return asha_config(make_config, **({"num_rungs": 2} | fields))


def _reloaded(make_config, method, **fields):
    """A new search method of the same config, loaded from ``method``'s state after a JSON trip."""
    again = make_search_method(_config(make_config, **fields))
    again.load_state_dict(json.loads(json.dumps(method.state_dict())))
    return again


def _optuna_states(method):
    """The Optuna study's trial states, by request id (trial n is the study's trial n - 1)."""
    return {t.number + 1: t.state.name for t in method.sampler.study.trials}


# -- refusals, word for word ----------------------------------------------------------------------


def test_asha_without_a_length_is_refused_naming_both_ways_to_give_one(make_config):
    with pytest.raises(SearcherError) as raised:
        make_search_method(_config(make_config, max_length=None))
    assert str(raised.value) == (
        "the async_halving searcher needs a length: 'max_length' (e.g. {batches: 937}) "
        "or 'time_metric' with 'max_time'"
    )


def test_a_length_of_zero_is_refused_and_one_unit_is_enough(make_config):
    with pytest.raises(SearcherError) as raised:
        make_search_method(_config(make_config, max_length=Length("batches", 0)))
    assert str(raised.value) == "searcher.max_length: the async_halving searcher needs a length >= 1"

    method = make_search_method(_config(make_config, max_length=Length("batches", 1)))
    assert method.brackets[0].units == [1, 1]
    assert said(method.initial_trials()) == [("Create", 1), ("Create", 2)]
    assert method.operation_length(1) == 1


def test_async_halving_without_num_rungs_is_refused_word_for_word(make_config):
    with pytest.raises(SearcherError) as raised:
        make_search_method(_config(make_config, num_rungs=None))
    assert str(raised.value) == "searcher.num_rungs: the async_halving searcher needs num_rungs"


def test_asha_without_max_trials_is_a_bug_the_config_loader_prevents(make_config):
    with pytest.raises(AssertionError) as raised:
        AsyncHalvingSearch.trial_slots(_config(make_config, max_trials=None))
    assert str(raised.value) == "the config loader requires max_trials for ASHA"


# -- concurrency ----------------------------------------------------------------------------------


def test_unlimited_concurrency_is_the_brackets_own_even_at_a_length_of_one(make_config):
    # max_concurrent_trials 0: one bracket of 2 rungs with divisor 2 runs 2**1 trials at once.
    config = _config(make_config, max_trials=8, max_concurrent_trials=0, max_length=Length("batches", 1))
    assert concurrent_slot_count(config) == 2


@pytest.mark.parametrize("length", [None, Length("batches", 0)], ids=["no-length", "zero"])
def test_a_config_the_search_refuses_gets_max_trials_slots_and_the_refusal_later(make_config, length):
    config = _config(make_config, max_trials=8, max_concurrent_trials=0, max_length=length)
    assert concurrent_slot_count(config) == 8
    with pytest.raises(SearcherError):
        make_search_method(config)


# -- what the sampler's model hears ---------------------------------------------------------------


def test_a_trial_that_ends_on_its_own_mid_search_is_pruned_in_the_model(make_config):
    method = make_search_method(_config(make_config, hyperparameters=ONE_HP, sampler="tpe"))
    method.initial_trials()
    assert method.validation_completed(1, validation_loss(0.5), 50) == []  # best at rung 50: trains on
    method.trial_exited(1)  # ... but its process ends at 50 of 100 batches
    assert _optuna_states(method)[1] == "PRUNED"


def test_a_paused_trial_resumed_to_the_top_is_complete_in_the_model(make_config):
    method = make_search_method(_config(make_config, hyperparameters=ONE_HP, sampler="tpe", stop_once=False))
    method.initial_trials()
    assert said(method.validation_completed(1, validation_loss(0.5), 50)) == [("Pause", 1), ("Create", 3)]
    assert method.trial_exited(1) == []  # the paused trial's process ends: part of pausing
    assert said(method.validation_completed(2, validation_loss(0.6), 50)) == [("Pause", 2), ("Resume", 1)]
    assert said(method.validation_completed(1, validation_loss(0.4), 150)) == [("Stop", 1), ("Create", 4)]
    method.trial_exited(1)
    states = _optuna_states(method)
    assert states[1] == "COMPLETE"
    assert method.sampler.study.trials[0].value == pytest.approx(0.4)
    assert states[2] == "RUNNING"  # paused, not over


# -- repeated and late end reports ----------------------------------------------------------------


def test_a_repeated_end_report_changes_no_count(make_config):
    method = make_search_method(_config(make_config))
    method.initial_trials()
    assert method.validation_completed(1, validation_loss(0.5), 50) == []
    assert said(method.validation_completed(1, validation_loss(0.5), 100)) == [("Stop", 1), ("Create", 3)]
    method.trial_exited(1)
    assert method.progress() == 0.25
    assert method.trial_exited(1) == []
    assert method.trial_exited_early(1, ExitedReason.ERRORED) == []
    assert method.progress() == 0.25
    assert method.brackets[0].state(1) == "closed"


def test_a_stopped_trial_that_then_errors_adds_no_value_to_its_rung(make_config):
    method = make_search_method(_config(make_config, max_trials=6, max_concurrent_trials=3))
    method.initial_trials()
    assert method.validation_completed(1, validation_loss(0.5), 50) == []
    # Two values at rung 50: only the best max(int(2/2), 1) = 1 goes on.
    assert said(method.validation_completed(2, validation_loss(0.9), 50)) == [("Stop", 2), ("Create", 4)]
    assert method.brackets[0].state(2) == "stopping"
    # Trial 2 errors on its way out: it already has its value at rung 50.
    assert said(method.trial_exited_early(2, ExitedReason.ERRORED)) == []
    # Three values at rung 50, so 0.7 (second) is past the best int(3/2) = 1 and stops.
    assert said(method.validation_completed(3, validation_loss(0.7), 50)) == [("Stop", 3), ("Create", 5)]


def test_a_promotion_trial_closed_then_reported_as_errored_counts_once(make_config):
    method = make_search_method(_config(make_config, stop_once=False, max_trials=2))
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)
    # The last trial at the bottom rung: 1 is promoted, 2 paused and, with no trial to come,
    # closed out at once.
    assert said(method.validation_completed(2, validation_loss(0.6), 50)) == [
        ("Pause", 2),
        ("Resume", 1),
        ("Stop", 2),
    ]
    assert method.progress() == 0.5
    assert method.trial_exited_early(2, ExitedReason.ERRORED) == []
    assert method.progress() == 0.5


# -- closed trials promoted to the top rung -------------------------------------------------------


def test_closed_trials_promoted_to_the_top_rung_arrive_there_as_the_worst(make_config):
    fields = {"stop_once": False, "max_concurrent_trials": 1}
    method = make_search_method(_config(make_config, **fields))
    assert said(method.initial_trials()) == [("Create", 1)]
    assert said(method.validation_completed(1, validation_loss(0.1), 50)) == [("Pause", 1), ("Create", 2)]
    assert method.trial_exited_early(1, ExitedReason.USER_CANCELED) == []
    # Trial 1 (best) is promoted to the top rung though closed; trial 2 pauses.
    assert said(method.validation_completed(2, validation_loss(0.2), 50)) == [("Pause", 2), ("Create", 3)]
    assert method.trial_exited_early(2, ExitedReason.USER_CANCELED) == []
    assert said(method.validation_completed(3, validation_loss(0.3), 50)) == [("Pause", 3), ("Create", 4)]
    # Four at rung 50: trial 2 (second best, closed) goes up too; no trial is left to come, so the
    # never-promoted paused trials are stopped and the search is over.
    assert said(method.validation_completed(4, validation_loss(0.4), 50)) == [
        ("Pause", 4),
        ("Stop", 3),
        ("Stop", 4),
        "Shutdown",
    ]
    top = method.state_dict()["brackets"][0]["rungs"][-1]
    assert sorted(unpack("q", top[1])) == [1, 2]
    assert unpack("d", top[0]) == [WORST, WORST]
    assert not method.brackets[0].reached_top(1) and not method.brackets[0].reached_top(2)


def test_a_trial_at_the_top_rung_is_there_once_after_its_exit(make_config):
    method = make_search_method(_config(make_config, stop_once=False))
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)
    method.validation_completed(2, validation_loss(0.6), 50)  # promotes 1
    assert said(method.validation_completed(1, validation_loss(0.4), 150)) == [("Stop", 1), ("Create", 4)]
    assert method.brackets[0].reached_top(1)
    method.trial_exited(1)
    top = method.state_dict()["brackets"][0]["rungs"][-1]
    assert unpack("q", top[1]) == [1]
    assert unpack("d", top[0]) == [0.4]
    assert method.state_dict()["brackets"][0]["top"] == [1]


# -- the stored state mid-search ------------------------------------------------------------------


def test_stopping_state_stored_mid_search_decides_as_the_original(make_config):
    method = make_search_method(_config(make_config))
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)
    assert said(method.validation_completed(2, validation_loss(0.9), 50)) == [("Stop", 2), ("Create", 3)]
    again = _reloaded(make_config, method)
    assert again.brackets[0].state(2) == "stopping"
    assert again.state_dict() == method.state_dict()
    assert said(again.validation_completed(3, validation_loss(0.8), 50)) == said(
        method.validation_completed(3, validation_loss(0.8), 50)
    )


def test_promotion_state_with_a_trial_closed_short_of_its_rung_survives_a_json_trip(make_config):
    method = make_search_method(_config(make_config, stop_once=False))
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)  # paused
    method.validation_completed(2, validation_loss(0.1), 30)
    assert said(method.trial_exited(2)) == [("Resume", 1)]  # 2 counts as the worst at rung 50
    again = _reloaded(make_config, method, stop_once=False)
    assert again.state_dict() == method.state_dict()
    bottom = again.state_dict()["brackets"][0]["rungs"][0]
    assert unpack("q", bottom[1]) == [1, 2]
    assert unpack("d", bottom[0]) == [0.5, WORST]
