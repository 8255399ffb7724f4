"""Stop-based ASHA (Determined 0.38): docs/semantics.md's "One ASHA bracket", event by event."""

from __future__ import annotations

import pytest

from det_airflow.config._types import Length
from det_airflow.errors import DetError
from det_airflow.searcher import (
    AsyncHalvingSearch,
    Create,
    ExitedReason,
    SearcherError,
    Shutdown,
    Stop,
    make_search_method,
    trial_slot_count,
)

from .conftest import RungMaster, asha_config, said, validation_loss

L100 = Length("batches", 100)


def _method(make_config, **fields):
    return make_search_method(asha_config(make_config, **({"num_rungs": 3} | fields)))


def _ids(actions, kind=Create):
    return [a.request_id for a in actions if isinstance(a, kind)]


def test_rungs_are_not_cumulative_and_the_top_rung_is_the_length(make_config):
    method = _method(make_config)
    assert isinstance(method, AsyncHalvingSearch)
    assert method.brackets[0].units == [25, 50, 100]
    assert method.rung_lengths() == [25, 50, 100]
    method.initial_trials()
    assert method.operation_length(1) == 100  # stop-based trials always aim for the full length


def test_one_bracket_event_by_event(make_config):
    method = _method(make_config)
    assert _ids(method.initial_trials()) == [1, 2]
    # Below the first rung's units nothing is decided.
    assert method.validation_completed(1, validation_loss(0.5), 10) == []
    # Rung 25: alone in the rung, trial 1 is the best so far and goes on.
    assert method.validation_completed(1, validation_loss(0.5), 25) == []
    # Trial 2 ranks 1 of 2; max(int(2/2), 1) = 1 go on: Stop, and a new trial takes its place.
    assert said(method.validation_completed(2, validation_loss(0.6), 25)) == [("Stop", 2), ("Create", 3)]
    # Reports on the way out change nothing; the exit after a Stop creates nothing more.
    assert method.validation_completed(2, validation_loss(0.1), 50) == []
    assert method.trial_exited(2) == []
    # One report can pass several rungs: 60 units reach rung 50 (and not 100).
    assert method.validation_completed(1, validation_loss(0.4), 60) == []
    assert method.validation_completed(3, validation_loss(0.1), 30) == []  # 1st of 3 at rung 25
    # The top rung closes the trial; fewer than max_trials exist, so one more is created.
    assert said(method.validation_completed(1, validation_loss(0.3), 100)) == [("Stop", 1), ("Create", 4)]
    # Trial 3 jumps to 100 units: rung 50 ranks it 2nd of 2, so it stops there; no trial is left.
    assert method.validation_completed(3, validation_loss(0.45), 100) == [Stop(3)]
    assert method.trial_exited(1) == [] and method.trial_exited(3) == []
    assert method.progress() == 0.75
    assert method.trial_exited_early(4, ExitedReason.ERRORED) == [Shutdown()]
    assert method.progress() == 1.0


def test_larger_is_better_ranks_by_the_negated_metric(make_config):
    method = _method(make_config, metric="accuracy", smaller_is_better=False)
    method.initial_trials()
    assert method.validation_completed(1, {"accuracy": 0.5}, 25) == []
    assert method.validation_completed(2, {"accuracy": 0.9}, 25) == []  # better: goes on
    assert _ids(method.validation_completed(1, {"accuracy": 0.6}, 50), Stop) == []
    assert _ids(method.validation_completed(2, {"accuracy": 0.1}, 50), Stop) == [2]


def test_errored_trials_count_as_the_worst_value_in_their_rung(make_config):
    method = _method(make_config, max_trials=6, max_concurrent_trials=1)
    method.initial_trials()
    assert _ids(method.trial_exited_early(1, ExitedReason.ERRORED)) == [2]
    assert _ids(method.trial_exited_early(2, ExitedReason.ERRORED)) == [3]
    assert _ids(method.trial_exited_early(3, ExitedReason.ERRORED)) == [4]
    # Rung 25 holds three worst values: 0.7 ranks 0 of 4 and 0.8 ranks 1 of 5; int(5/2) = 2 go on.
    assert method.validation_completed(4, validation_loss(0.7), 25) == []
    assert said(method.trial_exited(4)) == [("Create", 5)]  # ended on its own: replaced
    assert method.validation_completed(5, validation_loss(0.8), 25) == []


def test_a_user_canceled_trial_is_replaced_and_counts_toward_max_trials(make_config):
    method = _method(make_config, max_trials=2, max_concurrent_trials=1)
    method.initial_trials()
    assert _ids(method.trial_exited_early(1, ExitedReason.USER_CANCELED)) == [2]
    assert method.trial_exited_early(2, ExitedReason.USER_CANCELED) == [Shutdown(failure=False)]


def test_invalid_hyperparameters_are_replaced_and_do_not_count(make_config):
    master = (
        RungMaster(_method(make_config, max_trials=3), [25, 50, 100], early={2: ExitedReason.INVALID_HP})
        .start()
        .run()
    )
    assert _ids(master.actions) == [1, 2, 3, 4]
    assert master.actions[-1] == Shutdown()
    assert master.method.progress() == 1.0


def test_invalid_hyperparameters_values_leave_the_rungs(make_config):
    method = _method(make_config, max_concurrent_trials=1)
    method.initial_trials()
    assert method.validation_completed(1, validation_loss(0.1), 25) == []
    assert _ids(method.trial_exited_early(1, ExitedReason.INVALID_HP)) == [2]
    # Had trial 1's 0.1 stayed, 0.5 would rank 1 of 2 and stop.
    assert method.validation_completed(2, validation_loss(0.5), 25) == []


def test_every_trial_failing_ends_in_failure(make_config):
    method = _method(make_config, max_trials=2)
    method.initial_trials()
    method.trial_exited_early(1, ExitedReason.ERRORED)
    assert method.trial_exited_early(2, ExitedReason.ERRORED) == [Shutdown(failure=True)]


def test_a_full_search_stops_fewer_trials_at_each_higher_rung(make_config):
    method = _method(make_config, max_trials=32, max_concurrent_trials=4)
    master = RungMaster(method, [25, 50, 100]).start().run()
    assert len(master.creates) == 32 and master.actions[-1] == Shutdown()
    assert master.actions.count(Shutdown()) == 1
    stopped_at = [master.trained[i] for i in range(1, 33)]
    assert stopped_at.count(25) > stopped_at.count(50) > 0 and stopped_at.count(100) > 0
    assert sum(stopped_at) < 32 * 100 / 2


def test_a_missing_metric_is_a_searcher_error(make_config):
    method = _method(make_config)
    method.initial_trials()
    with pytest.raises(SearcherError, match="validation metric 'validation_loss' not found"):
        method.validation_completed(1, {"loss": 1.0}, 25)
    with pytest.raises(SearcherError, match="must be a number, got 'high'"):
        method.validation_completed(1, {"validation_loss": "high"}, 25)


def test_time_metric_and_max_time_measure_rungs_in_the_reported_metric(make_config):
    method = _method(make_config, max_length=None, time_metric="epochs_done", max_time=8, divisor=2)
    assert method.brackets[0].units == [2, 4, 8]
    method.initial_trials()
    assert method.validation_completed(1, {"validation_loss": 0.5, "epochs_done": 2}, 99999) == []
    assert _ids(method.validation_completed(2, {"validation_loss": 0.9, "epochs_done": 3}, 1), Stop) == [2]
    with pytest.raises(SearcherError) as err:
        method.validation_completed(1, {"validation_loss": 0.5}, 100)
    assert "time metric 'epochs_done' (searcher.time_metric) not found" in str(err.value)
    assert isinstance(err.value, DetError)


def test_records_lengths_count_the_reported_records(make_config):
    method = _method(make_config, max_length=Length("records", 1000))
    assert method.brackets[0].units == [250, 500, 1000]
    method.initial_trials()
    assert method.validation_completed(1, {"validation_loss": 0.5, "records": 250}, 8) == []
    # Without a "records" metric the batches trained count instead.
    assert _ids(method.validation_completed(2, {"validation_loss": 0.9}, 300), Stop) == [2]


def test_async_halving_without_a_length_or_num_rungs_is_a_searcher_error(make_config):
    with pytest.raises(SearcherError, match="needs a length"):
        make_search_method(make_config("async_halving", max_trials=4, num_rungs=2))
    with pytest.raises(SearcherError, match="num_rungs"):
        make_search_method(make_config("async_halving", max_trials=4, max_length=L100))


def test_operation_length_of_an_unknown_trial_is_a_bug(make_config):
    method = _method(make_config)
    method.initial_trials()
    with pytest.raises(ValueError, match="request id 9"):
        method.operation_length(9)
    with pytest.raises(ValueError, match="request id 9"):
        method.trial_exited(9)


def test_trial_slots_are_max_trials(make_config):
    assert trial_slot_count(make_config("async_halving", max_trials=7, num_rungs=2, max_length=L100)) == 7
