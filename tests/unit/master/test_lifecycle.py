"""The lifecycle: every legal and illegal state change, the history each one leaves, and the
races of pause, kill and a trial's exit (master on SQLite)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from det_airflow.master import experiment_state, lifecycle, reports, schema, trials
from det_airflow.master.db import Database
from det_airflow.states import ExperimentState, TrialState
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_queue import TASK, experiment, set_pool_slots, trial_ids

E, T = ExperimentState, TrialState


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path_factory.mktemp('lifecycle') / 'det.db'}")
    database.migrate()
    yield database
    database.engine.dispose()


@pytest.fixture(scope="module")
def ids(db: Database) -> tuple[int, int]:
    """One experiment with one trial whose states the tests set directly: (experiment, trial)."""
    with db.begin() as conn:
        e = conn.execute(
            insert(schema.experiments).values(
                name="e", owner="alice", labels=[], state=E.ACTIVE, config={}, config_yaml="",
                resource_pool="default_pool", searcher_name="single", search_done=False, progress=0.0,
                start_time=lifecycle.now(), archived=False,
            )
        ).inserted_primary_key[0]  # fmt: skip
        t = conn.execute(
            insert(schema.trials).values(
                experiment_id=e, request_id=1, state=T.QUEUED, hparams={}, trial_seed=1, summary={}
            )
        ).inserted_primary_key[0]
    return int(e), int(t)


def put(db: Database, table: Any, row_id: int, state: str) -> Any:
    with db.begin() as conn:
        conn.execute(update(table).where(table.c.id == row_id).values(state=state))
        return conn.execute(select(table).where(table.c.id == row_id)).one()


def changes(db: Database, kind: str, object_id: int | str) -> list[tuple[str | None, str, str]]:
    with db.read() as conn:
        return [(c["from"], c["to"], c["reason"]) for c in lifecycle.history(conn, kind, object_id)]


EXPERIMENT_PAIRS = [(a, b) for a in E for b in E]
TRIAL_PAIRS = [(a, b) for a in T for b in T]


@pytest.mark.parametrize(
    ("before", "after"), EXPERIMENT_PAIRS, ids=[f"{a}->{b}" for a, b in EXPERIMENT_PAIRS]
)
def test_every_experiment_move_is_written_and_recorded_or_refused_leaving_all_as_it_was(
    db: Database, ids: tuple[int, int], before: ExperimentState, after: ExperimentState
) -> None:
    e, _ = ids
    row = put(db, schema.experiments, e, before)
    recorded = changes(db, "experiment", e)
    legal = after in lifecycle.EXPERIMENT_MOVES[before]

    if legal:
        with db.begin() as conn:
            lifecycle.move_experiment(conn, row, after, "a test's reason", progress=0.5)
        assert (put_back := _state(db, schema.experiments, e)) == (after, 0.5), put_back
        assert changes(db, "experiment", e) == [*recorded, (before, after, "a test's reason")]
    else:
        with pytest.raises(
            lifecycle.StateError, match=f"experiment {e} is {before}; it cannot become {after}"
        ):
            with db.begin() as conn:
                lifecycle.move_experiment(conn, row, after, "a test's reason", progress=0.25)
        assert _state(db, schema.experiments, e)[0] == before
        assert changes(db, "experiment", e) == recorded
    with db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(progress=0.0))


@pytest.mark.parametrize(("before", "after"), TRIAL_PAIRS, ids=[f"{a}->{b}" for a, b in TRIAL_PAIRS])
def test_every_trial_move_is_written_and_recorded_or_refused_leaving_all_as_it_was(
    db: Database, ids: tuple[int, int], before: TrialState, after: TrialState
) -> None:
    _, t = ids
    row = put(db, schema.trials, t, before)
    recorded = changes(db, "trial", t)

    if after in lifecycle.TRIAL_MOVES[before]:
        with db.begin() as conn:
            lifecycle.move_trial(conn, row, after, "a test's reason", progress=0.5)
        assert _state(db, schema.trials, t) == (after, 0.5)
        assert changes(db, "trial", t) == [*recorded, (before, after, "a test's reason")]
    else:
        with pytest.raises(lifecycle.StateError, match=f"trial {t} is {before}; it cannot become {after}"):
            with db.begin() as conn:
                lifecycle.move_trial(conn, row, after, "a test's reason", progress=0.25)
        assert _state(db, schema.trials, t)[0] == before
        assert changes(db, "trial", t) == recorded
    with db.begin() as conn:
        conn.execute(update(schema.trials).where(schema.trials.c.id == t).values(progress=0.0))


def _state(db: Database, table: Any, row_id: int) -> tuple[str, float]:
    with db.read() as conn:
        row = conn.execute(select(table.c.state, table.c.progress).where(table.c.id == row_id)).one()
    return row.state, row.progress


def test_the_tables_end_in_terminal_states_and_every_state_has_a_row() -> None:
    assert set(lifecycle.EXPERIMENT_MOVES) == set(E)
    assert set(lifecycle.TRIAL_MOVES) == set(T)
    for state in T:
        assert (lifecycle.TRIAL_MOVES[state] == frozenset()) == state.is_terminal, state
        if not state.is_terminal:  # every trial can be killed or fail, whatever it is doing
            assert {T.CANCELED, T.ERROR} & lifecycle.TRIAL_MOVES[state], state
    for state in (E.COMPLETED, E.CANCELED, E.ERROR, E.DELETED):
        assert lifecycle.EXPERIMENT_MOVES[state] == frozenset()


def test_a_move_from_a_state_read_before_another_request_changed_it_is_refused(
    db: Database, ids: tuple[int, int]
) -> None:
    # PostgreSQL runs requests side by side: one read the trial RUNNING, another killed it since.
    _, t = ids
    stale = put(db, schema.trials, t, T.RUNNING)
    with db.begin() as conn:
        lifecycle.move_trial(conn, stale, T.STOPPING_KILLED, "det trial kill")
    recorded = changes(db, "trial", t)

    with pytest.raises(lifecycle.StateError, match=f"trial {t} changed state meanwhile; try again"):
        with db.begin() as conn:
            lifecycle.move_trial(conn, stale, T.COMPLETED, "its process exited 0")

    assert _state(db, schema.trials, t)[0] == T.STOPPING_KILLED
    assert changes(db, "trial", t) == recorded


def test_a_bulk_move_is_refused_whole_when_one_trial_may_not_move(db: Database, ids: tuple[int, int]) -> None:
    e, t = ids
    put(db, schema.trials, t, T.COMPLETED)
    with db.begin() as conn:
        other = conn.execute(
            insert(schema.trials).values(
                experiment_id=e, request_id=2, state=T.QUEUED, hparams={}, trial_seed=1, summary={}
            )
        ).inserted_primary_key[0]

    with pytest.raises(lifecycle.StateError, match=f"trial {t} is COMPLETED; it cannot become RUNNING"):
        with db.begin() as conn:
            lifecycle.move_trials(conn, schema.trials.c.experiment_id == e, T.RUNNING, "a test's reason")

    assert _state(db, schema.trials, other)[0] == T.QUEUED
    with db.begin() as conn:
        moved = lifecycle.move_trials(
            conn,
            schema.trials.c.experiment_id == e,
            T.COMPLETED,
            "the search ended",
            end_time=lifecycle.now(),
        )
    assert moved == [other]  # the one already COMPLETED is not moved (nor recorded) again
    assert changes(db, "trial", other)[-1] == (T.QUEUED, T.COMPLETED, "the search ended")


C1 = "0c1b7a3e-1c53-4d55-9d8f-000000000001"


def test_a_checkpoint_is_deleted_once_and_its_history_says_who_saved_it(
    people: People, creator: Creator
) -> None:
    set_pool_slots(2)
    e = experiment(people)
    (t,) = trial_ids(people, e)
    with people.db.begin() as conn:
        trials.acquire(conn, e, 0, TASK, dry_run=False)
        reports.register_checkpoint(conn, t, {"uuid": C1, "steps_completed": 10, "resources": {}})
        reports.delete_checkpoint(conn, t, C1)
        reports.delete_checkpoint(conn, t, C1)  # a retried delete: already done

    assert people.checkpoint(C1).state == "DELETED"
    assert changes(people.db, "checkpoint", C1) == [
        (None, "COMPLETED", f"trial {t} saved it at 10 steps"),
        ("COMPLETED", "DELETED", "det checkpoint delete"),
    ]


def test_a_trials_history_tells_its_runs_and_why_each_ended(people: People, creator: Creator) -> None:
    set_pool_slots(2)
    e = experiment(people)
    (t,) = trial_ids(people, e)
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
        trials.acquire(conn, e, 0, TASK, dry_run=False)
    # A container runner pulls the image, then starts the container.
    for state, why in ((T.PULLING, "pulling image i:1"), (T.STARTING, "pulled image i:1"), (T.RUNNING, "up")):
        with people.db.begin() as conn:
            assert trials.report_phase(conn, t, 1, state, why).state == state
    with people.db.begin() as conn:
        trials.exit_run(conn, t, 3)  # max_restarts defaults to 5: it is queued again
    with people.db.begin() as conn:
        trials.acquire(conn, e, 0, TASK, dry_run=False)
        # The first run's late report changes nothing; the second run's first metrics mark it running.
        assert trials.report_phase(conn, t, 1, T.RUNNING, "late").state == T.STARTING
        reports.report_metrics(
            conn, t, [{"group": "training", "steps_completed": 1, "metrics": {"loss": 1.0}}]
        )
    with people.db.begin() as conn:
        trials.exit_run(conn, t, 0)
        assert trials.report_phase(conn, t, 2, T.RUNNING, "late").state == T.COMPLETED

    task = f"{TASK['dag_id']}/{TASK['run_id']}/{TASK['task_id']}"
    assert changes(people.db, "trial", t) == [
        (T.QUEUED, T.STARTING, f"trial slot 0 of {task} runs it (run 1)"),
        (T.STARTING, T.PULLING, "pulling image i:1"),
        (T.PULLING, T.STARTING, "pulled image i:1"),
        (T.STARTING, T.RUNNING, "up"),
        (T.RUNNING, T.QUEUED, "its process exited 3; restart 1 of max_restarts 5"),
        (T.QUEUED, T.STARTING, f"trial slot 0 of {task} runs it (run 2)"),
        (T.STARTING, T.RUNNING, "its process reported metrics"),
        (T.RUNNING, T.COMPLETED, "its process exited 0"),
    ]
    assert [c[1:] for c in changes(people.db, "experiment", e)][-1] == (
        E.COMPLETED,
        "its search and every trial ended",
    )


def test_pause_activate_and_kill_are_recorded_with_the_verb(people: People, creator: Creator) -> None:
    e = experiment(people)
    (t,) = trial_ids(people, e)
    for action in ("pause", "activate", "pause", "kill"):
        with people.db.begin() as conn:
            experiment_state.change_state(conn, e, action)

    assert [c[1:] for c in changes(people.db, "experiment", e)] == [
        (E.PAUSED, "det experiment pause"),
        (E.ACTIVE, "det experiment activate"),
        (E.PAUSED, "det experiment pause"),
        (E.STOPPING_KILLED, "det experiment kill"),
        (E.CANCELED, "its search and every trial ended"),
    ]
    assert changes(people.db, "trial", t) == [
        (T.QUEUED, T.CANCELED, "its experiment was killed before it ran")
    ]


# --- races: the same requests from many threads, in every order the database lets them happen ------


def race(*requests: Callable[[], Any]) -> list[BaseException]:
    """Run the requests at once, each in its own transaction; returns what they raised."""
    start = threading.Barrier(len(requests))
    failures: list[BaseException] = []

    def run(request: Callable[[], Any]) -> None:
        start.wait()
        try:
            request()
        except lifecycle.StateError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def assert_one_chain(db: Database, kind: str, object_id: int) -> list[str]:
    """The recorded changes follow each other (each starts where the last ended), legally."""
    moves = lifecycle.TRIAL_MOVES if kind == "trial" else lifecycle.EXPERIMENT_MOVES
    chain = changes(db, kind, object_id)
    for (_, previous, _), (start, end, _) in zip(chain, chain[1:], strict=False):
        assert start == previous, chain
        assert end in moves[start], chain  # type: ignore[index]
    return [end for _, end, _ in chain]


@pytest.mark.parametrize("round_", range(5))
def test_kill_racing_the_trials_own_exit_ends_it_once(people: People, creator: Creator, round_: int) -> None:
    set_pool_slots(2)
    e = experiment(people)
    (t,) = trial_ids(people, e)
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
        trials.acquire(conn, e, 0, TASK, dry_run=False)

    def kill() -> None:
        with people.db.begin() as conn:
            trials.kill_trial(conn, t)

    def exit_() -> None:
        with people.db.begin() as conn:
            trials.exit_run(conn, t, 0)

    def started() -> None:  # its runner's word that the process started, racing both
        with people.db.begin() as conn:
            trials.report_phase(conn, t, 1, T.RUNNING, "its process starts")

    assert race(kill, exit_, kill, started) == []
    states = assert_one_chain(people.db, "trial", t)
    # Killed first: it ends CANCELED when its exit arrives; exited first: the kill finds it ended.
    # The runner's report moves it only while it is still starting.
    assert states in (
        [T.STARTING, T.RUNNING, T.STOPPING_KILLED, T.CANCELED],
        [T.STARTING, T.STOPPING_KILLED, T.CANCELED],
        [T.STARTING, T.RUNNING, T.COMPLETED],
        [T.STARTING, T.COMPLETED],
    ), states
    assert people.experiment(e).state == E.COMPLETED  # its one trial ended, by a kill or not


@pytest.mark.parametrize("round_", range(5))
def test_pause_kill_and_activate_racing_leave_the_experiment_killed(
    people: People, creator: Creator, round_: int
) -> None:
    e = experiment(people, trials_=3)

    def verb(action: str) -> Callable[[], None]:
        def request() -> None:
            with people.db.begin() as conn:
                experiment_state.change_state(conn, e, action)

        return request

    failures = race(verb("pause"), verb("kill"), verb("activate"), verb("pause"))

    # A verb the state no longer allows is refused with the reason (e.g. activate after the kill).
    assert all("cannot" in str(f) for f in failures), failures
    states = assert_one_chain(people.db, "experiment", e)
    assert states[-2:] == [E.STOPPING_KILLED, E.CANCELED], states
    for t in trial_ids(people, e):
        assert assert_one_chain(people.db, "trial", t)[-1] == T.CANCELED


def test_the_state_changes_are_read_over_the_api_by_who_may_read_the_experiment(
    people: People, creator: Creator
) -> None:
    first, second = experiment(people), experiment(people)
    (t,) = trial_ids(people, second)
    assert people.call("alice", "POST", f"/experiments/{second}/pause").status_code == 200
    assert people.call("alice", "POST", f"/trials/{t}/kill").status_code == 200

    answer = people.call("viewer", "GET", f"/experiments/{second}/state-changes").json()["state_changes"]
    assert [(c["from"], c["to"], c["reason"]) for c in answer] == [
        ("ACTIVE", "PAUSED", "det experiment pause")
    ]
    trial = people.call("viewer", "GET", f"/trials/{t}/state-changes").json()["state_changes"]
    assert [(c["from"], c["to"], c["reason"]) for c in trial] == [("QUEUED", "CANCELED", "det trial kill")]
    assert trial[0]["time"].startswith(str(lifecycle.now().year))
    # carol may read only the DAG det_1, the first experiment's.
    assert people.call("carol", "GET", f"/experiments/{first}/state-changes").status_code == 200
    assert people.call("carol", "GET", f"/experiments/{second}/state-changes").status_code == 403
    assert people.call("carol", "GET", f"/trials/{t}/state-changes").status_code == 403
    assert people.call(None, "GET", f"/trials/{t}/state-changes").status_code == 401
