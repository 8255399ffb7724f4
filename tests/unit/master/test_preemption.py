"""Priority preemption: which trials make room for a waiting job (the pure choice), and how a
preempted trial goes back to the queue and resumes, on the master's own tables."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from det_airflow.master import queue, reports, schema, trials
from det_airflow.master.queue import (
    Holder,
    Job,
    QueueConfigError,
    choose_fair_share_preemptions,
    choose_preemptions,
    fair_shares,
    plan_fair_share,
)
from tests.unit.master.creating import CONFIG, Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_queue import acquire, jobs, set_pool_slots, trial_ids


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


# --- the choice ----------------------------------------------------------------------------------


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


# --- on the det tables --------------------------------------------------------------------------


def experiment(people: People, *, priority: int, slots_per_trial: int = 1, trials_: int = 1) -> int:
    e = people.add_experiment(owner="alice")
    row = people.experiment(e)
    config = {**row.config, "resources": {"slots_per_trial": slots_per_trial, "priority": priority}}
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(config=config))
    for _ in range(trials_):
        people.add_trial(e, state="QUEUED")
    return e


def running_alone(people: People, *, priority: int) -> int:
    """An experiment whose one trial runs alone in a 1-slot pool."""
    set_pool_slots(1)
    e = experiment(people, priority=priority)
    assert acquire(people, e, 0) == "run"
    return e


def should_preempt(people: People, trial_id: int) -> bool:
    with people.db.read() as conn:
        return trials.should_preempt(conn, trial_id)


def exit_run(people: People, trial_id: int, code: int) -> tuple[str, int, bool]:
    with people.db.begin() as conn:
        trial, retry = trials.exit_run(conn, trial_id, code)
    return trial.state, trial.restarts, retry


def checkpoint(people: People, trial_id: int, uuid: str, steps: int) -> None:
    with people.db.begin() as conn:
        reports.register_checkpoint(conn, trial_id, {"uuid": uuid, "steps_completed": steps, "resources": {}})


def spec(people: People, e: int, slot: int) -> dict:
    with people.db.begin() as conn:
        answer = trials.acquire(conn, e, slot, {"try_number": 1}, dry_run=False)
    assert answer["status"] == "run", answer
    return dict(answer["spec"])


@pytest.fixture
def preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__PREEMPTION_POOLS", "other_pool, default_pool")


def test_without_preemption_a_waiting_job_only_waits(people: People, creator: Creator) -> None:
    set_pool_slots(2)
    low = experiment(people, priority=90, trials_=2)
    assert [acquire(people, low, slot) for slot in (0, 1)] == ["run", "run"]
    high = experiment(people, priority=10, slots_per_trial=2)
    assert acquire(people, high, 0) == "wait"
    assert [should_preempt(people, t) for t in trial_ids(people, low)] == [False, False]


FIRST_CHECKPOINT = "5f0c2e0a-7d1e-4a59-8f0e-00000000f157"


def test_preempted_trials_go_back_to_the_queue_without_a_restart_and_resume_from_their_checkpoint(
    people: People, creator: Creator, preemption: None
) -> None:
    set_pool_slots(2)
    low = experiment(people, priority=90, trials_=2)
    assert [acquire(people, low, slot) for slot in (0, 1)] == ["run", "run"]
    first, second = trial_ids(people, low)
    high = experiment(people, priority=10, slots_per_trial=2)

    assert acquire(people, high, 0, dry_run=True) == "wait"
    assert [should_preempt(people, t) for t in (first, second)] == [True, True]
    (listed_low,) = [j for j in jobs(people) if j["id"] == low]
    assert (listed_low["state"], listed_low["preempting_trials"]) == ("STATE_SCHEDULED", 2)
    with people.db.read() as conn:
        logs = [r.message for r in reports.read_logs(conn, first, after=None, limit=None, tail=None)]
    assert any(f"preempted: experiment {high} of higher priority" in line for line in logs), logs
    assert acquire(people, high, 0, dry_run=True) == "wait", "the preempted trials still hold the pool"

    checkpoint(people, first, FIRST_CHECKPOINT, 30)
    assert exit_run(people, first, 0) == ("QUEUED", 0, False)
    assert not should_preempt(people, first)
    assert acquire(people, high, 0, dry_run=True) == "wait", "one of two slots is free"
    # The second ignored the signal and was killed after preemption_timeout: still no restart.
    assert exit_run(people, second, -9) == ("QUEUED", 0, False)
    assert acquire(people, low, 0) == "wait", "the preempted job took its slots back before the waiting one"
    assert acquire(people, high, 0) == "run"
    (high_trial,) = trial_ids(people, high)

    assert exit_run(people, high_trial, 0) == ("COMPLETED", 0, False)
    resumed = spec(people, low, 0)
    assert (resumed["trial_id"], resumed["latest_checkpoint"], resumed["steps_completed"]) == (
        first,
        FIRST_CHECKPOINT,
        30,
    )
    assert people.trial(first).restarts == 0


@pytest.fixture
def polled(people: People, creator: Creator, preemption: None) -> int:
    """A priority-90 trial running in a 1-slot pool, whose poll just looked for waiting jobs."""
    low = running_alone(people, priority=90)
    (victim,) = trial_ids(people, low)
    trials._last_preempt.clear()
    trials.make_room_if_due(people.db, victim)  # the next look is 2 s away
    return victim


def test_running_trials_polls_preempt_for_a_job_whose_task_cannot_start(people: People, polled: int) -> None:
    victim = polled
    assert not should_preempt(people, victim), "nothing waits yet"
    experiment(people, priority=10)  # its trial waits; its Airflow task holds no pool slot to ask
    trials._last_preempt.clear()
    trials.make_room_if_due(people.db, victim)
    assert should_preempt(people, victim)


def test_a_submitted_job_preempts_at_once_without_waiting_for_a_poll(
    people: People, creator: Creator, polled: int
) -> None:
    victim = polled
    answer = creator.create(config=CONFIG + "resources: {priority: 10}\n")

    assert answer.status_code == 200, answer.text
    assert should_preempt(people, victim)
    with people.db.read() as conn:
        logs = [r.message for r in reports.read_logs(conn, victim, after=None, limit=None, tail=None)]
    high = answer.json()["experiment"]["id"]
    assert any(f"preempted: experiment {high} of higher priority" in line for line in logs), logs


def test_a_submitted_job_of_lower_priority_preempts_no_one(
    people: People, creator: Creator, preemption: None
) -> None:
    running = running_alone(people, priority=10)

    assert creator.create(config=CONFIG + "resources: {priority: 90}\n").status_code == 200

    assert not should_preempt(people, trial_ids(people, running)[0])


def test_a_trial_admitted_but_not_started_loses_its_admission_at_once(
    people: People, creator: Creator, preemption: None
) -> None:
    set_pool_slots(1)
    low = experiment(people, priority=90)
    assert acquire(people, low, 0, dry_run=True) == "run"  # admitted: it holds the slot
    high = experiment(people, priority=10)
    assert acquire(people, high, 0, dry_run=True) == "run", "the admission was taken back for the waiting job"
    assert acquire(people, low, 0) == "wait"


def test_only_pools_with_preemption_preempt(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__PREEMPTION_POOLS", "gpus")
    low = running_alone(people, priority=90)
    high = experiment(people, priority=10)
    assert acquire(people, high, 0) == "wait"
    assert not should_preempt(people, trial_ids(people, low)[0])
    monkeypatch.setenv("AIRFLOW__DET__PREEMPTION", "true")
    assert acquire(people, high, 0) == "wait"
    assert should_preempt(people, trial_ids(people, low)[0]), "[det] preemption = true covers every pool"


def test_a_preempted_trial_of_a_paused_experiment_pauses(
    people: People, creator: Creator, preemption: None
) -> None:
    low = running_alone(people, priority=90)
    (trial,) = trial_ids(people, low)
    assert acquire(people, experiment(people, priority=10), 0) == "wait"
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == low).values(state="PAUSED"))
    assert exit_run(people, trial, 0) == ("PAUSED", 0, False)
    assert people.trial(trial).preempt_requested_at is None


def test_a_killed_preempted_trial_ends_canceled(people: People, creator: Creator, preemption: None) -> None:
    low = running_alone(people, priority=90)
    (trial,) = trial_ids(people, low)
    assert acquire(people, experiment(people, priority=10), 0) == "wait"
    with people.db.begin() as conn:
        trials.kill_trial(conn, trial)
    assert exit_run(people, trial, -9)[0] == "CANCELED"


def test_a_bad_preemption_setting_names_the_setting_to_the_waiting_trial_only(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    low = running_alone(people, priority=90)
    (running_trial,) = trial_ids(people, low)
    high = experiment(people, priority=10)
    monkeypatch.setenv("AIRFLOW__DET__PREEMPTION", "sometimes")
    with pytest.raises(QueueConfigError, match=r"airflow.cfg \[det\] preemption: expected true or false"):
        acquire(people, high, 0)
    trials._last_preempt.clear()
    trials.make_room_if_due(people.db, running_trial)  # a running trial's poll does not fail for it
    assert not should_preempt(people, running_trial)


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


def test_fair_share_on_the_det_tables(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__SCHEDULER", "fair_share")
    monkeypatch.setenv("AIRFLOW__DET__PREEMPTION", "true")
    set_pool_slots(2)
    first = experiment(people, priority=10, trials_=2)
    assert [acquire(people, first, slot) for slot in (0, 1)] == ["run", "run"]
    second = experiment(people, priority=90, trials_=2)
    assert acquire(people, second, 0) == "wait"
    older, newer = trial_ids(people, first)
    assert [should_preempt(people, t) for t in (older, newer)] == [False, True], (
        "under fair share the priority-10 job gives one of its two slots to the priority-90 job"
    )
    assert exit_run(people, newer, 0) == ("QUEUED", 0, False)
    assert acquire(people, second, 0) == "run"
    assert acquire(people, first, 1) == "wait"


def test_fair_share_per_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__FAIR_SHARE_POOLS", "gpus, cpus")
    assert [queue.scheduler(pool) for pool in ("gpus", "cpus", "default_pool")] == [
        "fair_share",
        "fair_share",
        "priority",
    ]


def test_a_bad_scheduler_setting_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__SCHEDULER", "round_robin")
    with pytest.raises(
        QueueConfigError, match=r"airflow.cfg \[det\] scheduler: expected priority or fair_share"
    ):
        queue.scheduler("default_pool")


def test_a_run_told_to_stop_by_a_pause_resumes_when_activated_before_it_exits(
    people: People, creator: Creator
) -> None:
    e = running_alone(people, priority=42)
    (trial,) = trial_ids(people, e)
    assert people.call("alice", "POST", f"/experiments/{e}/pause").status_code == 200
    assert trials.preemption_answer(people.db, trial) is True  # the run hears it and starts to stop
    assert people.call("alice", "POST", f"/experiments/{e}/activate").status_code == 200
    # Its exit 0 is the stop the master asked for, not the end of its work.
    assert exit_run(people, trial, 0) == ("QUEUED", 0, False)
    assert people.experiment(e).state == "ACTIVE"
    assert spec(people, e, 0)["trial_id"] == trial


def test_a_run_marked_told_to_stop_is_that_run_only(people: People, creator: Creator) -> None:
    e = running_alone(people, priority=42)
    (trial,) = trial_ids(people, e)
    assert people.call("alice", "POST", f"/experiments/{e}/pause").status_code == 200
    assert people.call("alice", "POST", f"/experiments/{e}/activate").status_code == 200
    assert trials.preemption_answer(people.db, trial) is False  # the pause came and went unheard
    assert people.trial(trial).told_to_stop_run is None
    assert people.call("alice", "POST", f"/experiments/{e}/pause").status_code == 200
    assert trials.preemption_answer(people.db, trial) is True
    assert people.trial(trial).told_to_stop_run == people.trial(trial).run_id == 1
