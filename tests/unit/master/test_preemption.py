"""Priority preemption on the master's own tables: how a preempted trial goes back to the queue and
resumes (which trials make room, the pure choice: test_queue_policy.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from det_airflow.master import housekeeping, queue, reports, schema, trial_logs, trials
from det_airflow.master.queue import QueueConfigError
from tests.unit.master.creating import CONFIG, Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_queue import acquire, jobs, set_pool_slots, trial_ids

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
        logs = [r.message for r in trial_logs.read_logs(conn, first, after=None, limit=None, tail=None)]
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


def housekeeping_preempts(people: People) -> None:
    """The master's background job preempts for waiting jobs, as it does every 2 s."""
    assert housekeeping.run_job("preempt for waiting jobs", people.db)


@pytest.fixture
def looked(people: People, creator: Creator, preemption: None) -> int:
    """A priority-90 trial running in a 1-slot pool, after the background job looked for waiting jobs."""
    low = running_alone(people, priority=90)
    (victim,) = trial_ids(people, low)
    housekeeping_preempts(people)
    return victim


def test_housekeeping_preempts_for_a_job_whose_task_cannot_start(people: People, looked: int) -> None:
    victim = looked
    assert not should_preempt(people, victim), "nothing waits yet"
    experiment(people, priority=10)  # its trial waits; its Airflow task holds no pool slot to ask
    housekeeping_preempts(people)
    assert should_preempt(people, victim)


def test_a_submitted_job_preempts_at_once_without_waiting_for_housekeeping(
    people: People, creator: Creator, looked: int
) -> None:
    victim = looked
    answer = creator.create(config=CONFIG + "resources: {priority: 10}\n")

    assert answer.status_code == 200, answer.text
    assert should_preempt(people, victim)
    with people.db.read() as conn:
        logs = [r.message for r in trial_logs.read_logs(conn, victim, after=None, limit=None, tail=None)]
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
    # The background job fails, logged under its name, and preempts no one.
    assert not housekeeping.run_job("preempt for waiting jobs", people.db)
    assert not should_preempt(people, running_trial)


# --- fair share ([det] scheduler = fair_share) ------------------------------------------------


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
