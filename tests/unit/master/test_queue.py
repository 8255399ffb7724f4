"""The admission gate on the master's own tables (its decisions alone: test_queue_policy.py), and
what `det job` shows and changes."""

from __future__ import annotations

from typing import Any

import pytest
from airflow import settings
from airflow.models.pool import Pool
from sqlalchemy import select, update

from det_airflow.master import housekeeping, schema, trial_logs, trials
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

TASK = {"dag_id": "det_x", "run_id": "r", "task_id": "trial", "map_index": 0, "try_number": 1}


# --- on the det tables, with an Airflow pool ----------------------------------------------------


def set_pool_slots(slots: int, name: str = "default_pool") -> None:
    with settings.Session() as session:  # type: ignore[misc]
        pool = session.query(Pool).filter(Pool.pool == name).one_or_none()
        if pool is None:
            session.add(Pool(pool=name, slots=slots, description="", include_deferred=False))
        else:
            pool.slots = slots
        session.commit()


def experiment(people: People, *, slots_per_trial: int = 1, trials_: int = 1, owner: str = "alice") -> int:
    e = people.add_experiment(owner=owner)
    row = people.experiment(e)
    config = {**row.config, "resources": {"slots_per_trial": slots_per_trial}}
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(config=config))
    for _ in range(trials_):
        people.add_trial(e, state="QUEUED")
    return e


def acquire(people: People, e: int, slot: int, *, dry_run: bool = False) -> str:
    with people.db.begin() as conn:
        return str(trials.acquire(conn, e, slot, TASK, dry_run=dry_run)["status"])


def end_runs(people: People, e: int) -> None:
    with people.db.begin() as conn:
        conn.execute(
            update(schema.trials)
            .where(schema.trials.c.experiment_id == e, schema.trials.c.state.in_(["STARTING", "RUNNING"]))
            .values(state="COMPLETED")
        )


def test_acquire_waits_until_the_queue_admits_the_trial(people: People, creator: Creator) -> None:
    set_pool_slots(4)
    small = experiment(people, trials_=3)
    for slot in range(3):
        assert acquire(people, small, slot) == "run"
    big = experiment(people, slots_per_trial=4)
    later = experiment(people)
    assert acquire(people, later, 0, dry_run=True) == "wait", "a later 1-slot job took the free slot"
    assert acquire(people, later, 0) == "wait"
    assert acquire(people, big, 0, dry_run=True) == "wait", "4 slots admitted while 3 are held"
    end_runs(people, small)
    assert acquire(people, later, 0, dry_run=True) == "wait"
    assert acquire(people, big, 0, dry_run=True) == "run"
    assert acquire(people, later, 0, dry_run=True) == "wait", "the admitted 4-slot trial holds the pool"
    assert acquire(people, big, 0) == "run"
    end_runs(people, big)
    assert acquire(people, later, 0, dry_run=True) == "run"


def test_one_experiment_in_the_default_pool_is_admitted_at_once(people: People, creator: Creator) -> None:
    set_pool_slots(128)
    e = experiment(people, trials_=2)
    assert acquire(people, e, 0, dry_run=True) == "run"
    assert acquire(people, e, 0) == "run"
    assert acquire(people, e, 1) == "run"


# --- the routes -------------------------------------------------------------------------------


def jobs(people: People, user: str = "alice", **params: Any) -> list[dict[str, Any]]:
    answer = people.call(user, "GET", "/jobs", params=params)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["jobs"])


def change(people: People, user: str, *updates: dict[str, Any]) -> Any:
    return people.call(user, "POST", "/jobs/update", json={"updates": list(updates)})


def test_job_list_is_in_scheduling_order(people: People, creator: Creator) -> None:
    set_pool_slots(4)
    first = experiment(people, trials_=2)
    assert acquire(people, first, 0) == "run"
    second = experiment(people, slots_per_trial=8)
    third = experiment(people)
    assert change(people, "alice", {"job_id": third, "priority": 10}).status_code == 200
    listed = jobs(people)
    assert [(j["jobs_ahead"], j["id"], j["priority"], j["state"]) for j in listed] == [
        (0, third, 10, "STATE_QUEUED"),
        (1, first, 42, "STATE_SCHEDULED"),
        (2, second, 42, "STATE_QUEUED"),
    ]
    assert (listed[1]["acquired_slots"], listed[1]["needed_slots"]) == (1, 2)
    assert listed[2]["fits_pool"] is False
    # Before its searcher has asked for trials, a job still needs one trial's slots.
    not_started = experiment(people, slots_per_trial=3, trials_=0)
    assert [(j["acquired_slots"], j["needed_slots"]) for j in jobs(people) if j["id"] == not_started] == [
        (0, 3)
    ]
    assert listed[0]["type"] == "TYPE_EXPERIMENT"
    assert len(jobs(people, limit=1)) == 1
    assert jobs(people, resource_pool="elsewhere") == []


def test_a_paused_experiment_is_listed_paused_not_queued(people: People, creator: Creator) -> None:
    set_pool_slots(4)
    paused = experiment(people)
    assert people.call("alice", "POST", f"/experiments/{paused}/pause").status_code == 200
    waiting = experiment(people)
    states = {j["id"]: j["state"] for j in jobs(people)}
    assert (states[paused], states[waiting]) == ("STATE_PAUSED", "STATE_QUEUED")
    assert people.call("alice", "POST", f"/experiments/{paused}/activate").status_code == 200
    assert {j["id"]: j["state"] for j in jobs(people)}[paused] == "STATE_QUEUED"


def test_jobs_the_caller_may_not_read_hide_name_and_owner(people: People, creator: Creator) -> None:
    set_pool_slots(4)
    readable = experiment(people)  # DAG det_1: carol may read it
    hidden = experiment(people)
    listed = {j["id"]: j for j in jobs(people, "carol")}
    assert (listed[readable]["name"], listed[readable]["user"]) == ("mnist", "alice")
    assert (listed[hidden]["name"], listed[hidden]["user"]) == (None, None)


def test_ahead_of_takes_the_anchors_priority_and_place(people: People, creator: Creator) -> None:
    set_pool_slots(4)
    a, b, c = (experiment(people) for _ in range(3))
    assert change(people, "alice", {"job_id": a, "priority": 5}).status_code == 200
    answer = change(people, "alice", {"job_id": c, "ahead_of": a})
    assert answer.status_code == 200, answer.text
    assert [j["id"] for j in jobs(people)] == [c, a, b]
    assert change(people, "alice", {"job_id": c, "behind_of": b}).status_code == 200
    assert [(j["id"], j["priority"]) for j in jobs(people)] == [(a, 5), (b, 42), (c, 42)]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"ahead_of": "SELF"}, 400, "cannot be moved ahead of itself"),
        ({"behind_of": 999}, 400, "anchor job 999 not found"),
        ({"resource_pool": "nowhere"}, 400, "Airflow pool 'nowhere' does not exist"),
        ({"resource_pool": "tiny"}, 400, "needs 2 slots per trial, but Airflow pool 'tiny' has only 1 slots"),
        ({"max_slots": 1}, 400, "max_slots 1 is less than its 2 slots per trial"),
    ],
)
def test_bad_changes_are_refused_and_nothing_changes(
    people: People, creator: Creator, body: dict[str, Any], status: int, message: str
) -> None:
    set_pool_slots(4)
    set_pool_slots(1, "tiny")
    e = experiment(people, slots_per_trial=2)
    other = experiment(people)
    body = {key: (e if value == "SELF" else value) for key, value in body.items()}
    answer = change(people, "alice", {"job_id": other, "priority": 3}, {"job_id": e, **body})
    assert answer.status_code == status
    assert message in answer.json()["detail"]
    assert [(j["id"], j["priority"], j["resource_pool"]) for j in jobs(people)] == [
        (e, 42, "default_pool"),
        (other, 42, "default_pool"),
    ], "a refused batch changed something"


def test_exactly_one_change_per_update(people: People, creator: Creator) -> None:
    e = experiment(people)
    answer = change(people, "alice", {"job_id": e, "priority": 3, "weight": 2})
    assert answer.status_code == 422
    assert "exactly one of" in str(answer.json()["detail"])
    assert change(people, "alice", {"job_id": e, "priority": 100}).status_code == 422


def test_only_the_owner_or_an_admin_changes_a_job(people: People, creator: Creator) -> None:
    set_pool_slots(4)
    e = experiment(people)
    answer = change(people, "bob", {"job_id": e, "priority": 1})
    assert answer.status_code == 403
    assert "change the priority of" in answer.json()["detail"]
    assert change(people, "viewer", {"job_id": e, "priority": 1}).status_code == 403
    assert change(people, "admin", {"job_id": e, "priority": 1}).status_code == 200
    assert jobs(people)[0]["priority"] == 1


def test_moving_to_another_pool_moves_the_waiting_trials(people: People, creator: Creator) -> None:
    set_pool_slots(1)
    set_pool_slots(4, "gpus")
    blocker = experiment(people)
    assert acquire(people, blocker, 0) == "run"
    e = experiment(people)
    assert acquire(people, e, 0, dry_run=True) == "wait"
    assert change(people, "alice", {"job_id": e, "resource_pool": "gpus"}).status_code == 200
    assert [j["id"] for j in jobs(people, resource_pool="gpus")] == [e]
    assert acquire(people, e, 0, dry_run=True) == "run"


def test_max_slots_set_on_a_job_caps_it(people: People, creator: Creator) -> None:
    set_pool_slots(8)
    e = experiment(people, trials_=3)
    assert change(people, "alice", {"job_id": e, "max_slots": 2}).status_code == 200
    assert [acquire(people, e, slot) for slot in range(3)] == ["run", "run", "wait"]


def trial_ids(people: People, experiment_id: int) -> list[int]:
    with people.db.read() as conn:
        return list(
            conn.execute(
                select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
            ).scalars()
        )


def _airflow_says(monkeypatch: pytest.MonkeyPatch, state: str, try_number: int = 1) -> None:
    """Airflow's record of TASK (the trial task that acquired the first trial) is `state`."""
    from det_airflow.master import airflow_bridge

    key = (TASK["dag_id"], TASK["run_id"], TASK["task_id"], TASK["map_index"])
    monkeypatch.setattr(
        airflow_bridge, "task_instance_states", lambda keys: {key: (state, try_number)} if key in keys else {}
    )


def _housekeeping_reclaims(people: People) -> None:
    """The master's background job looks for lost runs, as it does every few seconds."""
    assert housekeeping.run_job("reclaim lost runs", people.db)


def test_a_run_whose_task_ended_without_reporting_frees_its_slots_and_restarts_elsewhere(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_pool_slots(1)
    lost = experiment(people)
    assert acquire(people, lost, 0) == "run"
    (lost_trial,) = trial_ids(people, lost)
    waiting = experiment(people)

    _airflow_says(monkeypatch, "failed")
    assert acquire(people, waiting, 0) == "wait"
    # A slot's request leaves lost runs to housekeeping: until it looks, the run holds the slot.
    assert (people.trial(lost_trial).state, people.trial(lost_trial).restarts) == ("STARTING", 0)
    _airflow_says(monkeypatch, "running")
    _housekeeping_reclaims(people)
    assert acquire(people, waiting, 0) == "wait"  # the pool's one slot is held by a live run
    _airflow_says(monkeypatch, "up_for_retry")
    _housekeeping_reclaims(people)
    assert acquire(people, waiting, 0) == "wait"  # its next try takes the trial back
    _airflow_says(monkeypatch, "failed")
    _housekeeping_reclaims(people)
    # Its job is ahead in the queue: the lost trial gets the slot back, in a slot of its own DAG run.
    assert acquire(people, waiting, 0) == "wait"
    trial = people.trial(lost_trial)
    assert (trial.state, trial.slot, trial.restarts) == ("QUEUED", None, 1)
    assert acquire(people, lost, 1) == "run"
    assert (people.trial(lost_trial).state, people.trial(lost_trial).slot) == ("STARTING", 1)
    with people.db.read() as conn:
        logs = [r.message for r in trial_logs.read_logs(conn, lost_trial, after=None, limit=None, tail=None)]
    assert any("ended failed without reporting the trial's exit" in line for line in logs), logs


def test_a_lost_run_past_its_restarts_ends_in_error_and_the_search_hears_it(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_pool_slots(1)
    lost = experiment(people)
    with people.db.begin() as conn:
        row = people.experiment(lost)
        conn.execute(
            update(schema.experiments)
            .where(schema.experiments.c.id == lost)
            .values(config={**row.config, "max_restarts": 0})
        )
    assert acquire(people, lost, 0) == "run"
    (lost_trial,) = trial_ids(people, lost)

    _airflow_says(monkeypatch, "failed")
    _housekeeping_reclaims(people)
    assert acquire(people, experiment(people), 0) == "run"

    assert people.trial(lost_trial).state == "ERROR"


def test_a_run_taken_back_while_airflow_is_asked_is_not_reclaimed(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow is asked outside det's write lock: a run a newer try of its task acquires meanwhile
    (the try Airflow's answer predates) stays that try's."""
    from det_airflow.master import airflow_bridge

    set_pool_slots(1)
    e = experiment(people)
    assert acquire(people, e, 0) == "run"
    (trial_id,) = trial_ids(people, e)
    key = (TASK["dag_id"], TASK["run_id"], TASK["task_id"], TASK["map_index"])

    def failed_while_retried(keys: list[tuple[str, str, str, int]]) -> dict[Any, tuple[str, int]]:
        with people.db.begin() as conn:  # the task's next try acquires its trial again meanwhile
            trials.acquire(conn, e, 0, {**TASK, "try_number": 2}, dry_run=False)
        return {key: ("failed", 1)}

    monkeypatch.setattr(airflow_bridge, "task_instance_states", failed_while_retried)
    _housekeeping_reclaims(people)
    trial = people.trial(trial_id)
    assert (trial.state, trial.restarts, trial.task["try_number"]) == ("STARTING", 0, 2)
