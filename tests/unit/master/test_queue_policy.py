"""The job queue's decisions (master/queue_policy.py): scheduling order, whole gangs, no backfill
past a job that could fit, which trials to preempt, fair share, and which trials hold slots. Each
test states the invariant it checks."""

from __future__ import annotations

from det_airflow.master.queue_policy import (
    Holder,
    Job,
    QueueSettings,
    choose_fair_share_preemptions,
    choose_preemptions,
    fair_shares,
    holds_and_waits,
    plan,
    plan_fair_share,
    position_near,
)
from det_airflow.states import ExperimentState, TrialState

# --- admission ------------------------------------------------------------------------------------


def one_slot(job_id: int, *, held: int = 0, waiting: int = 0, priority: int = 42) -> Job:
    return Job(job_id, priority, float(job_id), 1, held=held, waiting=waiting)


def test_a_4_slot_job_keeps_its_place_against_a_stream_of_1_slot_jobs() -> None:
    big = Job(2, 42, 2.0, 4, waiting=1)
    running = 3  # slots the first 1-slot job holds when the 4-slot job is submitted
    started_after_big: list[int] = []
    big_started = False
    for newcomer in range(3, 30):  # a new 1-slot job arrives each round; one running trial ends
        jobs = [one_slot(1, held=running), big if not big_started else Job(2, 42, 2.0, 4, held=4)]
        jobs += [one_slot(j, waiting=1) for j in range(3, newcomer + 1) if j not in started_after_big]
        decision = plan(4, jobs)
        for job in decision.order:
            if decision.admits(job.id) and job.id != 2:
                started_after_big.append(job.id)
        if decision.admits(2):
            big_started = True
            assert not started_after_big, f"1-slot jobs {started_after_big} started before the 4-slot job"
        running = max(0, running - 1)
    assert big_started, "the 4-slot job never started"
    assert started_after_big == [], "1-slot jobs started while the 4-slot job held the whole pool"


def test_priority_comes_before_submission_order() -> None:
    decision = plan(2, [one_slot(1, waiting=5, priority=50), one_slot(2, waiting=5, priority=10)])
    assert [job.id for job in decision.order] == [2, 1]
    assert decision.admitted == {2: 2}


def test_a_job_too_big_for_the_pool_blocks_no_one() -> None:
    decision = plan(4, [Job(1, 1, 1.0, 8, waiting=1), one_slot(2, waiting=2)])
    assert decision.unfit == {1}
    assert decision.admitted == {2: 2}


def test_max_slots_caps_a_job_without_holding_back_the_next() -> None:
    capped = Job(1, 42, 1.0, 2, held=2, waiting=3, max_slots=4)
    decision = plan(16, [capped, one_slot(2, waiting=3)])
    assert decision.admitted == {1: 1, 2: 3}
    full = Job(1, 42, 1.0, 2, held=4, waiting=3, max_slots=4)
    assert plan(16, [full, one_slot(2, waiting=1)]).admitted == {2: 1}


def test_whole_gangs_only() -> None:
    decision = plan(5, [Job(1, 42, 1.0, 2, held=2, waiting=3), one_slot(2, waiting=1)])
    assert decision.admitted == {1: 1}, "3 free slots fit one 2-slot trial; the rest waits, blocking job 2"


def test_unlimited_pool_admits_everything() -> None:
    decision = plan(-1, [Job(1, 42, 1.0, 8, held=64, waiting=100), one_slot(2, waiting=7)])
    assert decision.admitted == {1: 100, 2: 7}


def test_queue_position_orders_jobs_of_one_priority() -> None:
    jobs = [one_slot(1, waiting=1), one_slot(2, waiting=1), Job(3, 42, 1.5, 1, waiting=1)]
    assert [job.id for job in plan(1, jobs).order] == [1, 3, 2]
    assert plan(1, jobs).admitted == {1: 1}


def test_positions_ahead_and_behind_are_halfway_between_neighbours() -> None:
    jobs = [one_slot(1), one_slot(2), one_slot(3), one_slot(4, priority=10)]
    assert position_near(jobs, 2, ahead=True, moving_id=3) == 1.5
    assert position_near(jobs, 1, ahead=True, moving_id=3) == 0.0
    assert position_near(jobs, 1, ahead=False, moving_id=3) == 1.5
    assert position_near(jobs, 2, ahead=False, moving_id=3) == 3.0


def test_jobs_of_one_priority_are_admitted_in_submission_order() -> None:
    jobs = [one_slot(3, waiting=1), one_slot(1, waiting=1), one_slot(2, waiting=1)]
    assert plan(2, jobs).admitted == {1: 1, 2: 1}, "the two oldest jobs get the two slots"


def test_a_gang_is_admitted_whole_or_not_at_all() -> None:
    gang = Job(1, 42, 1.0, 3, waiting=1)
    assert plan(2, [gang]).admitted == {}, "two free slots start no part of a 3-slot gang"
    assert plan(3, [gang]).admitted == {1: 1}


# --- preemption -----------------------------------------------------------------------------------


def holder(
    trial_id: int, priority: int, *, slots: int = 1, since: float = 0.0, releasing: bool = False
) -> Holder:
    # The job id is the priority: in these cases each priority is one job.
    return Holder(trial_id, priority, priority, slots, since or float(trial_id), releasing)


def running(priority: int, slots: int) -> Job:
    return Job(priority, priority, float(priority), 1, held=slots)


def waiting(
    job_id: int, priority: int, *, gang: int = 1, trials_: int = 1, max_slots: int | None = None
) -> Job:
    return Job(job_id, priority, float(job_id), gang, waiting=trials_, max_slots=max_slots)


def test_a_waiting_gang_preempts_lower_priority_trials_until_it_fits() -> None:
    chosen = choose_preemptions(2, [running(90, 2), waiting(1, 10, gang=2)], [holder(1, 90), holder(2, 90)])
    assert chosen == {2: 1, 1: 1}, "both 1-slot trials make room for the 2-slot gang, newest first"


def test_priority_99_goes_first_then_the_newest() -> None:
    holders = [holder(1, 50, since=300.0), holder(2, 99, since=100.0), holder(3, 99, since=200.0)]
    jobs_ = [Job(50, 50, 50.0, 1, held=1), Job(99, 99, 99.0, 1, held=2)]
    assert list(choose_preemptions(3, [*jobs_, waiting(1, 10)], holders)) == [3]
    assert list(choose_preemptions(3, [*jobs_, waiting(1, 10, trials_=2)], holders)) == [3, 2]
    assert list(choose_preemptions(3, [*jobs_, waiting(1, 10, trials_=3)], holders)) == [3, 2, 1]


def test_no_more_than_needed() -> None:
    holders = [holder(t, 90) for t in range(1, 5)]
    chosen = choose_preemptions(4, [running(90, 4), waiting(1, 10, gang=2)], holders)
    assert list(chosen) == [4, 3], "a 2-slot gang needs two of the four 1-slot trials"


def test_free_slots_count_before_anyone_is_preempted() -> None:
    chosen = choose_preemptions(3, [running(90, 2), waiting(1, 10, gang=2)], [holder(1, 90), holder(2, 90)])
    assert list(chosen) == [2], "one slot is free: the gang needs only one more"
    assert (
        choose_preemptions(4, [running(90, 2), waiting(1, 10, gang=2)], [holder(1, 90), holder(2, 90)]) == {}
    )


def test_a_big_trial_taken_last_spares_the_small_ones_taken_before_it() -> None:
    holders = [holder(1, 99, slots=1), holder(2, 95, slots=1), holder(3, 90, slots=4)]
    jobs_ = [running(99, 1), running(95, 1), Job(90, 90, 90.0, 4, held=4)]
    assert list(choose_preemptions(6, [*jobs_, waiting(1, 10, gang=4)], holders)) == [3]


def test_nothing_is_preempted_when_even_all_lower_trials_would_not_make_room() -> None:
    holders = [holder(1, 90, slots=2), holder(2, 30, slots=2)]
    jobs_ = [Job(90, 90, 90.0, 2, held=2), Job(30, 30, 30.0, 2, held=2), waiting(1, 50, gang=4)]
    assert choose_preemptions(4, jobs_, holders) == {}


def test_equal_or_higher_priority_is_never_preempted() -> None:
    assert choose_preemptions(1, [running(42, 1), waiting(1, 42)], [holder(1, 42)]) == {}
    assert choose_preemptions(1, [running(10, 1), waiting(1, 42)], [holder(1, 10)]) == {}


def test_trials_already_on_their_way_out_count_as_free() -> None:
    jobs_ = [running(90, 2), waiting(1, 10, gang=2)]
    one_leaving = [holder(1, 90, releasing=True), holder(2, 90)]
    assert list(choose_preemptions(2, jobs_, one_leaving)) == [2]
    both_leaving = [holder(1, 90, releasing=True), holder(2, 90, releasing=True)]
    assert choose_preemptions(2, jobs_, both_leaving) == {}, "asked twice, nothing more is preempted"


def test_each_waiting_job_preempts_only_priorities_below_its_own() -> None:
    holders = [holder(1, 15), holder(2, 90)]
    jobs_ = [running(15, 1), running(90, 1), waiting(3, 10), waiting(4, 20)]
    assert choose_preemptions(2, jobs_, holders) == {2: 3}, (
        "job 3 (priority 10) takes the priority-90 trial; job 4 (priority 20) may not take the priority-15 one"
    )


def test_later_jobs_preempt_too_once_the_first_fits() -> None:
    holders = [holder(t, 90) for t in range(1, 4)]
    chosen = choose_preemptions(3, [running(90, 3), waiting(4, 10), waiting(5, 20, trials_=2)], holders)
    assert chosen == {3: 4, 2: 5, 1: 5}


def test_a_job_too_big_for_the_pool_preempts_no_one_and_blocks_no_one() -> None:
    jobs_ = [running(90, 2), waiting(1, 1, gang=4), waiting(2, 10)]
    assert choose_preemptions(2, jobs_, [holder(1, 90), holder(2, 90)]) == {2: 2}


def test_a_job_at_its_max_slots_preempts_no_one() -> None:
    at_cap = Job(1, 10, 1.0, 1, held=1, waiting=2, max_slots=1)
    assert choose_preemptions(2, [at_cap, running(90, 1)], [holder(5, 10), holder(6, 90)]) == {}


def test_an_unlimited_pool_never_preempts() -> None:
    assert choose_preemptions(-1, [running(90, 8), waiting(1, 1, gang=8)], [holder(1, 90, slots=8)]) == {}


# --- fair share ([det] scheduler = fair_share) ------------------------------------------------


def fair(job_id: int, *, weight: float = 1.0, held: int = 0, waiting: int = 0, gang: int = 1) -> Job:
    return Job(job_id, 42, float(job_id), gang, held=held, waiting=waiting, weight=weight)


def test_shares_follow_weights_and_no_job_gets_more_than_it_wants() -> None:
    assert fair_shares(8, [fair(1, waiting=8), fair(2, waiting=8, weight=3)]) == {1: 2.0, 2: 6.0}
    assert fair_shares(10, [fair(1, waiting=2), fair(2, waiting=100)]) == {1: 2.0, 2: 8.0}
    assert fair_shares(4, [fair(1), fair(2, waiting=9)]) == {1: 0.0, 2: 4.0}, (
        "a job wanting nothing gets nothing"
    )


def test_fair_share_admits_each_job_its_share() -> None:
    decision = plan_fair_share(4, [fair(1, waiting=4), fair(2, waiting=4)])
    assert decision.admitted == {1: 2, 2: 2}
    weighted = plan_fair_share(4, [fair(1, waiting=4), fair(2, waiting=4, weight=3)])
    assert weighted.admitted == {1: 1, 2: 3}


def test_fair_share_leaves_no_slot_idle() -> None:
    assert plan_fair_share(4, [fair(1, waiting=9), fair(2, held=1)]).admitted == {1: 3}


def test_fair_share_admits_whole_gangs_and_keeps_a_waiting_gangs_turn() -> None:
    jobs_ = [fair(1, held=3), fair(2, waiting=1, gang=2, weight=2), fair(3, waiting=1)]
    assert fair_shares(4, jobs_) == {1: 1.0, 2: 2.0, 3: 1.0}
    decision = plan_fair_share(4, jobs_)
    assert decision.admitted == {}, "the 2-slot gang, below its share, waits; nothing goes past it"


def test_fair_share_preempts_the_newest_trials_of_a_job_above_its_share() -> None:
    holders = [holder(t, 42, since=float(t)) for t in range(1, 5)]
    holders = [Holder(h.trial_id, 1, 42, 1, h.since) for h in holders]
    chosen = choose_fair_share_preemptions(4, [fair(1, held=4), fair(2, waiting=4)], holders)
    assert chosen == {4: 2, 3: 2}


def test_fair_share_never_takes_a_job_below_its_share() -> None:
    holders = [Holder(1, 1, 42, 1, 1.0), Holder(2, 1, 42, 1, 2.0), Holder(3, 2, 42, 1, 3.0)]
    jobs_ = [fair(1, held=2), fair(2, held=1, waiting=3)]
    assert choose_fair_share_preemptions(3, jobs_, holders) == {}, "each holds what its share of 1.5 allows"
    weighted = [fair(1, held=2, weight=1), fair(2, held=1, waiting=3, weight=2)]
    assert choose_fair_share_preemptions(3, weighted, holders) == {2: 2}


def test_fair_share_counts_trials_already_leaving() -> None:
    holders = [Holder(1, 1, 42, 1, 1.0, releasing=True), Holder(2, 1, 42, 1, 2.0)]
    assert choose_fair_share_preemptions(2, [fair(1, held=2), fair(2, waiting=2)], holders) == {}


# --- which trials hold slots -----------------------------------------------------------------------


def test_a_running_trial_holds_its_slots_whatever_its_experiment_does() -> None:
    for exp_state in (ExperimentState.ACTIVE, ExperimentState.PAUSED, ExperimentState.STOPPING_KILLED):
        assert holds_and_waits(exp_state, TrialState.RUNNING, False, True, True) == (True, False)


def test_an_admitted_trial_holds_its_slots_until_it_starts() -> None:
    assert holds_and_waits(ExperimentState.ACTIVE, TrialState.QUEUED, True, False, False) == (True, False)


def test_a_trial_not_meant_to_run_now_holds_and_waits_for_nothing() -> None:
    paused = holds_and_waits(ExperimentState.PAUSED, TrialState.QUEUED, True, False, False)
    at_its_rung = holds_and_waits(ExperimentState.ACTIVE, TrialState.PAUSED, False, True, False)
    assert paused == at_its_rung == (False, False)


def test_a_queued_trial_waits_for_admission_unless_asked_to_stop() -> None:
    assert holds_and_waits(ExperimentState.ACTIVE, TrialState.QUEUED, False, False, False) == (False, True)
    assert holds_and_waits(ExperimentState.ACTIVE, TrialState.QUEUED, False, False, True) == (False, False)


# --- settings ----------------------------------------------------------------------------------------


def given(
    scheduler: str = "priority",
    preemption: bool = False,
    preemption_pools: tuple[str, ...] = (),
    fair_share_pools: tuple[str, ...] = (),
) -> QueueSettings:
    return QueueSettings(scheduler, preemption, preemption_pools, fair_share_pools)


def test_a_pool_named_for_fair_share_shares_fairly_whatever_the_scheduler() -> None:
    named = given(fair_share_pools=("gpus",))
    assert [named.scheduler_of(pool) for pool in ("gpus", "cpus")] == ["fair_share", "priority"]
    assert given(scheduler="fair_share").scheduler_of("cpus") == "fair_share"


def test_preemption_is_off_unless_set_for_every_pool_or_named_pools() -> None:
    assert not given().preempts("gpus") and not given().preempts_anywhere()
    named = given(preemption_pools=("gpus",))
    assert (named.preempts("gpus"), named.preempts("cpus"), named.preempts_anywhere()) == (True, False, True)
    assert given(preemption=True).preempts("cpus")
