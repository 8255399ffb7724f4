"""Trial slots that run trial after trial: what the master answers a slot between its trials."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.master import airflow_bridge, housekeeping, schema, trials
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_preemption import exit_run
from tests.unit.master.test_queue import TASK, experiment, set_pool_slots, trial_ids


def ask(people: People, e: int, slot: int, **task: Any) -> dict[str, Any]:
    with people.db.begin() as conn:
        return trials.acquire(conn, e, slot, {**TASK, "map_index": slot, **task}, dry_run=False)


def set_experiment(people: People, e: int, **values: Any) -> None:
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(**values))


def set_trial(people: People, trial_id: int, **values: Any) -> None:
    with people.db.begin() as conn:
        conn.execute(update(schema.trials).where(schema.trials.c.id == trial_id).values(**values))


@pytest.fixture
def first_running(people: People, creator: Creator) -> tuple[int, int, int]:
    """An experiment of two trials whose first runs in slot 0: (experiment, first, second)."""
    set_pool_slots(4)
    e = experiment(people, trials_=2)
    first, second = trial_ids(people, e)
    assert ask(people, e, 0)["trial"].id == first
    return e, first, second


def test_a_slot_runs_the_next_trial_once_its_trial_ends(
    people: People, first_running: tuple[int, int, int]
) -> None:
    e, first, second = first_running

    assert exit_run(people, first, 0) == ("COMPLETED", 0, False)

    answer = ask(people, e, 0)
    assert (answer["status"], answer["trial"].id) == ("run", second)
    assert people.trial(second).task["map_index"] == 0  # the trial names the task instance that ran it


def test_a_trial_paused_at_its_rung_gives_its_slot_to_the_next_trial(
    people: People, first_running: tuple[int, int, int]
) -> None:
    e, first, second = first_running
    set_trial(people, first, pause_requested=True)  # the search pauses it at a rung

    assert exit_run(people, first, 0) == ("PAUSED", 0, False)

    assert people.trial(first).slot is None
    assert ask(people, e, 0)["trial"].id == second
    # Promoted: whichever slot is free resumes it.
    set_trial(people, first, pause_requested=False, state="QUEUED")
    assert ask(people, e, 1)["trial"].id == first


def test_a_trial_killed_for_ignoring_a_pause_counts_no_restart_and_keeps_its_slot(
    people: People, first_running: tuple[int, int, int]
) -> None:
    e, first, _ = first_running
    set_experiment(people, e, state="PAUSED")

    assert exit_run(people, first, -9) == ("PAUSED", 0, False)

    assert people.trial(first).slot == 0
    set_experiment(people, e, state="ACTIVE")
    assert ask(people, e, 0)["trial"].id == first  # resumed in its slot from its latest checkpoint


def test_the_first_slot_to_ask_links_the_run_and_another_run_is_refused(
    people: People, creator: Creator
) -> None:
    set_pool_slots(4)
    e = experiment(people, trials_=2)

    assert ask(people, e, 0, run_id="scheduled__2026-11-23")["status"] == "run"
    assert people.experiment(e).dag_run_id == "scheduled__2026-11-23"

    answer = ask(people, e, 0, run_id="manual__again")
    assert answer == {
        "status": "refused",
        "message": f"experiment {e} already runs as DAG run 'scheduled__2026-11-23'; create a new "
        "experiment with `det experiment create` instead of re-triggering its DAG",
    }
    assert people.experiment(e).dag_run_id == "scheduled__2026-11-23"


def test_a_slot_with_nothing_left_names_the_trials_that_ended_in_it(
    people: People, first_running: tuple[int, int, int]
) -> None:
    e, first, second = first_running
    assert exit_run(people, first, 0)[0] == "COMPLETED"
    assert ask(people, e, 0)["trial"].id == second
    assert exit_run(people, second, 0)[0] == "COMPLETED"
    set_experiment(people, e, search_done=True)

    # A later try of the slot's task (an activation starts one) learns what the earlier ones ran.
    assert ask(people, e, 0, try_number=2) == {"status": "done", "ran": [first, second]}
    assert ask(people, e, 1) == {"status": "done", "ran": []}


# --- an activation starts the slots of its paused trials anew ---


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, list[int]]]:
    """The slots the master asks Airflow to start in a new try: (dag_id, run_id, map indexes)."""
    calls: list[tuple[str, str, list[int]]] = []

    def start(dag_id: str, run_id: str, map_indexes: list[int]) -> list[int]:
        calls.append((dag_id, run_id, map_indexes))
        return map_indexes

    monkeypatch.setattr(airflow_bridge, "start_deferred_slots_anew", start)
    return calls


def change(people: People, e: int, action: str) -> str:
    answer = people.call("alice", "POST", f"/experiments/{e}/{action}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["experiment"]["state"])


def paused_alone(people: People, pool_slots: int) -> tuple[int, int]:
    """A one-trial experiment paused after its trial ran in slot 0: (experiment, trial)."""
    set_pool_slots(pool_slots)
    e = experiment(people)
    (paused,) = trial_ids(people, e)
    assert ask(people, e, 0)["trial"].id == paused
    assert change(people, e, "pause") == "PAUSED"
    assert exit_run(people, paused, 0)[0] == "PAUSED"
    return e, paused


def test_an_activation_starts_the_slots_holding_its_paused_trials_in_a_new_try(
    people: People, creator: Creator, started: list[tuple[str, str, list[int]]]
) -> None:
    set_pool_slots(4)
    e = experiment(people, trials_=3)
    first, second, third = trial_ids(people, e)
    assert ask(people, e, 0)["trial"].id == first
    assert ask(people, e, 2)["trial"].id == second
    assert change(people, e, "pause") == "PAUSED"
    assert exit_run(people, first, 0)[0] == "PAUSED"
    assert exit_run(people, second, 0)[0] == "PAUSED"

    assert change(people, e, "activate") == "ACTIVE"

    # Not slot 1: no trial of its was paused (the third trial never ran); its trigger wakes it.
    assert started == [(f"det_{e}", "r", [0, 2])]
    assert [people.trial(t).state for t in (first, second, third)] == ["PAUSED", "PAUSED", "QUEUED"]
    assert ask(people, e, 0, try_number=2)["trial"].id == first  # the new try resumes it


def test_an_activation_leaves_a_paused_trial_the_queue_does_not_admit_to_its_trigger(
    people: People, creator: Creator, started: list[tuple[str, str, list[int]]]
) -> None:
    e, paused = paused_alone(people, pool_slots=1)
    other = experiment(people)
    assert ask(people, other, 0)["status"] == "run"  # takes the pool's only slot meanwhile

    assert change(people, e, "activate") == "ACTIVE"

    assert started == []  # a new try would only defer again
    assert people.trial(paused).state == "PAUSED"


def test_an_activation_stands_when_airflow_cannot_start_the_slots(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    e, paused = paused_alone(people, pool_slots=4)

    def refuse(dag_id: str, run_id: str, map_indexes: list[int]) -> list[int]:
        raise airflow_bridge.AirflowRecordError(f"Airflow task instances of DAG run '{run_id}': locked")

    monkeypatch.setattr(airflow_bridge, "start_deferred_slots_anew", refuse)

    assert change(people, e, "activate") == "ACTIVE"  # the slot's trigger resumes it instead
    assert "the slots resume when their triggers look" in caplog.text
    assert people.experiment(e).state == "ACTIVE"


# --- the search's end ends the slots left waiting for a trial ---


@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The slots Airflow has deferred waiting for a trial in run "r", by DAG (the test sets them)."""
    waiting: dict[str, list[int]] = {}

    def deferred_slots() -> dict[tuple[str, str], list[int]]:
        return {(dag_id, "r"): list(slots) for dag_id, slots in waiting.items() if slots}

    monkeypatch.setattr(airflow_bridge, "deferred_slots", deferred_slots)
    return waiting


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[float, ...]]]:
    """The housekeeping jobs the requests ask for (``run_soon``): (name, seconds from now)."""
    calls: list[tuple[str, tuple[float, ...]]] = []
    monkeypatch.setattr(housekeeping, "run_soon", lambda name, *after: calls.append((name, after)))
    return calls


def run_asked(people: People, asked: list[tuple[str, tuple[float, ...]]]) -> None:
    """What the housekeeping thread does with them: the job that ends the slots left waiting."""
    if any(name == housekeeping.END_SLOTS_LEFT_WAITING for name, _ in asked):
        assert housekeeping.run_job(housekeeping.END_SLOTS_LEFT_WAITING, people.db)


def test_the_searchs_last_trial_ends_the_slots_left_waiting_at_once(
    people: People,
    first_running: tuple[int, int, int],
    deferred: dict[str, list[int]],
    started: list[tuple[str, str, list[int]]],
    service_headers: dict[str, str],
    asked: list[tuple[str, tuple[float, ...]]],
) -> None:
    e, first, second = first_running
    assert ask(people, e, 1)["trial"].id == second
    assert ask(people, e, 2) == {"status": "wait"}  # nothing left for it yet: it defers
    deferred[f"det_{e}"] = [2]

    def exit_(trial_id: int) -> str:
        answer = people.client.post(
            f"/api/v1/internal/trials/{trial_id}/exit", json={"exit_code": 0}, headers=service_headers
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["trial"]["state"])

    assert exit_(first) == "COMPLETED"
    run_asked(people, asked)
    assert started == []  # the search may still create trials for it
    set_experiment(people, e, search_done=True)  # as the search shuts down on its last trial's end
    assert exit_(second) == "COMPLETED"
    # At once, and again while a slot told to wait meanwhile defers.
    assert (housekeeping.END_SLOTS_LEFT_WAITING, housekeeping.END_SLOTS_LOOKS) in asked
    run_asked(people, asked)

    assert started == [(f"det_{e}", "r", [2])]
    assert ask(people, e, 2, try_number=2) == {"status": "done", "ran": []}  # its new try ends


def test_a_canceled_experiments_slots_left_waiting_end_at_once(
    people: People,
    creator: Creator,
    deferred: dict[str, list[int]],
    started: list[tuple[str, str, list[int]]],
    asked: list[tuple[str, tuple[float, ...]]],
) -> None:
    e, paused = paused_alone(people, pool_slots=4)
    deferred[f"det_{e}"] = [0]

    assert change(people, e, "cancel") in ("STOPPING_CANCELED", "CANCELED")
    run_asked(people, asked)

    assert started == [(f"det_{e}", "r", [0])]
    assert people.trial(paused).state == "CANCELED"


def test_slots_left_waiting_end_through_their_triggers_when_airflow_cannot_start_them(
    people: People,
    first_running: tuple[int, int, int],
    deferred: dict[str, list[int]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    e, first, second = first_running
    assert exit_run(people, first, 0)[0] == "COMPLETED"
    set_trial(people, second, state="CANCELED")
    set_experiment(people, e, search_done=True)
    deferred[f"det_{e}"] = [1, 2]

    def refuse(dag_id: str, run_id: str, map_indexes: list[int]) -> list[int]:
        raise airflow_bridge.AirflowRecordError(f"Airflow task instances of DAG run '{run_id}': locked")

    monkeypatch.setattr(airflow_bridge, "start_deferred_slots_anew", refuse)

    assert trials.end_slots_left_waiting(people.db) == []
    assert "the slots end when their triggers look" in caplog.text
