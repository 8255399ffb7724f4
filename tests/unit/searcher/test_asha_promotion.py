"""Promotion-based ASHA (*seed* era, ``stop_once: false``): cumulative rungs, Pause and Resume."""

from __future__ import annotations

from det_airflow.config._types import Length
from det_airflow.searcher import ExitedReason, Pause, Resume, Shutdown, Stop, make_search_method

from .conftest import RungMaster, asha_config, said, validation_loss


def _method(make_config, **fields):
    return make_search_method(asha_config(make_config, **({"num_rungs": 2, "stop_once": False} | fields)))


def test_rungs_are_cumulative(make_config):
    method = _method(make_config, num_rungs=3, divisor=4, max_length=Length("batches", 937))
    assert method.brackets[0].units == [58, 292, 1229]


def test_trials_pause_at_their_rung_and_the_best_go_straight_on(make_config):
    method = _method(make_config)
    assert said(method.initial_trials()) == [("Create", 1), ("Create", 2)]
    assert method.operation_length(1) == 50
    # Below its rung a report decides nothing.
    assert method.validation_completed(1, validation_loss(0.9), 20) == []
    # int(1/2) = 0 to promote: trial 1 pauses, and its place goes to a new trial.
    assert said(method.validation_completed(1, validation_loss(0.5), 50)) == [("Pause", 1), ("Create", 3)]
    # int(2/2) = 1: trial 2 ranks first, so it is promoted at once and trains on to 150.
    assert method.validation_completed(2, validation_loss(0.4), 50) == []
    assert method.operation_length(2) == 150
    assert said(method.validation_completed(3, validation_loss(0.6), 50)) == [("Pause", 3), ("Create", 4)]
    # The last trial of the bottom rung: promoted; then the rung is closed out: the never-promoted
    # paused trials are stopped (and closed by the method: they have no process to wait for).
    assert said(method.validation_completed(4, validation_loss(0.3), 50)) == [("Stop", 1), ("Stop", 3)]
    assert method.trial_exited(1) == []  # a late exit for a closed trial changes nothing
    # The top rung closes a trial.
    assert method.validation_completed(2, validation_loss(0.35), 150) == [Stop(2)]
    assert method.validation_completed(4, validation_loss(0.2), 150) == [Stop(4)]
    assert method.trial_exited(2) == []
    assert method.trial_exited(4) == [Shutdown()]
    assert method.progress() == 1.0


def test_a_paused_trial_resumes_when_the_rung_grows(make_config):
    method = _method(make_config)
    method.initial_trials()
    assert said(method.validation_completed(1, validation_loss(0.5), 50)) == [("Pause", 1), ("Create", 3)]
    # Two in the rung: one should be promoted. Trial 2 is worse, so trial 1 is resumed.
    actions = method.validation_completed(2, validation_loss(0.6), 50)
    assert actions == [Pause(2), Resume(1)]  # no new trial: the resumed one takes the place
    assert method.operation_length(1) == 150
    assert method.operation_length(2) == 50


def test_a_paused_trials_process_ending_is_not_an_exit(make_config):
    method = _method(make_config)
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)
    assert method.trial_exited(1) == []
    assert said(method.validation_completed(2, validation_loss(0.6), 50)) == [("Pause", 2), ("Resume", 1)]


def test_a_trial_that_errors_counts_as_the_worst_value_at_its_rung(make_config):
    method = _method(make_config)
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)  # paused
    # Trial 2 errors on its way to rung 50: it joins it as the worst, which promotes trial 1 (who
    # takes trial 2's place: no new trial).
    assert said(method.trial_exited_early(2, ExitedReason.ERRORED)) == [("Resume", 1)]
    assert said(method.validation_completed(1, validation_loss(0.4), 150)) == [("Stop", 1), ("Create", 4)]


def test_a_trial_that_ends_on_its_own_before_its_rung_counts_as_the_worst_there(make_config):
    method = _method(make_config)
    method.initial_trials()
    method.validation_completed(1, validation_loss(0.5), 50)  # paused
    # Trial 2's process ends (exit 0) at 30 batches, short of rung 50: the rung counts it as its
    # worst value, as an error would, so trial 1 is promoted into its place.
    method.validation_completed(2, validation_loss(0.1), 30)
    assert said(method.trial_exited(2)) == [("Resume", 1)]
    assert method.brackets[0].state(2) == "closed"
    assert method.trial_exited(2) == []  # a repeated exit changes nothing


def test_a_closed_trial_that_gets_promoted_arrives_at_the_next_rung_as_the_worst(make_config):
    method = _method(make_config, num_rungs=3, max_trials=8, max_concurrent_trials=1)
    method.initial_trials()
    assert said(method.validation_completed(1, validation_loss(0.1), 25)) == [("Pause", 1), ("Create", 2)]
    assert said(method.trial_exited_early(1, ExitedReason.USER_CANCELED)) == []  # paused, now closed
    # Trial 2 makes the promotion count 1: trial 1 is promoted but cannot train, so it reaches
    # rung 75 as the worst value; trial 2 pauses and a new trial is created.
    assert said(method.validation_completed(2, validation_loss(0.2), 25)) == [("Pause", 2), ("Create", 3)]
    assert method.brackets[0].state(1) == "closed"


def test_invalid_hyperparameters_are_replaced_and_do_not_count(make_config):
    master = (
        RungMaster(_method(make_config, max_trials=4), [50, 150], early={3: ExitedReason.INVALID_HP})
        .start()
        .run()
    )
    assert len(master.creates) == 5
    assert master.actions[-1] == Shutdown()
    assert not master.paused and not master.running


def test_a_full_search_pauses_resumes_and_closes_every_trial(make_config):
    method = _method(make_config, num_rungs=3, max_trials=27, max_concurrent_trials=3, divisor=3)
    units = method.brackets[0].units
    assert units == [11, 44, 144]
    master = RungMaster(method, units).start().run()
    assert len(master.creates) == 27 and master.actions[-1] == Shutdown()
    reached = [master.trained[i] for i in range(1, 28)]
    assert reached.count(11) == 27 - 9 and reached.count(44) == 9 - 3 and reached.count(144) == 3
    assert any(isinstance(a, Resume) for a in master.actions)
    stops = [a.request_id for a in master.actions if isinstance(a, Stop)]
    assert sorted(stops) == list(range(1, 28))  # every trial is closed with a Stop exactly once


def test_adaptive_asha_runs_promotion_brackets_too(make_config):
    config = make_config(
        "adaptive_asha", max_trials=16, max_length=Length("batches", 937), divisor=4, stop_once=False
    )
    method = make_search_method(config)
    assert [b.units for b in method.brackets] == [[58, 292, 1229], [234, 1171]]
    master = RungMaster(method, method.rung_lengths()).start().run()
    assert master.actions[-1] == Shutdown() and len(master.creates) == 16
