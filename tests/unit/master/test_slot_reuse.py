"""Trial slots that run trial after trial: what the master answers a slot between its trials."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.master import schema, trials
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
