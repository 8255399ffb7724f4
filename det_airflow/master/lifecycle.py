"""The one home of experiment, trial and checkpoint states.

The tables below say which state may follow which (Determined's states, docs/semantics.md §5). The
functions here are the only code that writes a state: each checks the move against its table,
writes it only if nobody changed the state meanwhile (the row's state is part of the UPDATE's
condition, so two racing requests cannot both move the same object), and records it in
``det_state_changes`` with its time and reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Table, select

from det_airflow.errors import DetError
from det_airflow.master import schema, webhook_events
from det_airflow.states import ExperimentState, TrialState


class StateError(DetError):
    """The object is not in a state that allows the request (HTTP 409)."""


class NotFound(DetError):
    """No such object (HTTP 404)."""


def now() -> datetime:
    return datetime.now(UTC)


E, T = ExperimentState, TrialState

EXPERIMENT_MOVES: Mapping[ExperimentState, frozenset[ExperimentState]] = {
    E.ACTIVE: frozenset(
        {E.PAUSED, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR, E.COMPLETED, E.ERROR}
    ),
    E.PAUSED: frozenset(
        {E.ACTIVE, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR, E.COMPLETED, E.ERROR}
    ),
    E.STOPPING_CANCELED: frozenset({E.STOPPING_KILLED, E.CANCELED}),
    E.STOPPING_KILLED: frozenset({E.CANCELED}),
    E.STOPPING_ERROR: frozenset({E.STOPPING_KILLED, E.ERROR}),
    E.STOPPING_COMPLETED: frozenset({E.STOPPING_KILLED, E.COMPLETED, E.ERROR}),
    E.COMPLETED: frozenset(),
    E.CANCELED: frozenset(),
    E.ERROR: frozenset(),
    E.DELETING: frozenset({E.DELETED}),
    E.DELETED: frozenset(),
}

TRIAL_MOVES: Mapping[TrialState, frozenset[TrialState]] = {
    # Waiting for a slot and the queue's admission; closed by the search, a kill or a lost run.
    # (An unmanaged trial is created RUNNING: its process started before it was registered.)
    T.QUEUED: frozenset({T.STARTING, T.RUNNING, T.COMPLETED, T.CANCELED, T.ERROR}),
    # A slot runs the trial: STARTING while its runner prepares the run (PULLING while a container
    # runner pulls the image), RUNNING once its process or container started. A new run (its last
    # run's task was lost, or a slot's new try) starts over at STARTING.
    T.PULLING: frozenset(
        {T.STARTING, T.RUNNING, T.QUEUED, T.PAUSED, T.STOPPING_KILLED, T.COMPLETED, T.CANCELED, T.ERROR}
    ),
    T.STARTING: frozenset(
        {
            T.STARTING,
            T.PULLING,
            T.RUNNING,
            T.QUEUED,
            T.PAUSED,
            T.STOPPING_KILLED,
            T.COMPLETED,
            T.CANCELED,
            T.ERROR,
        }
    ),
    T.RUNNING: frozenset(
        {T.STARTING, T.QUEUED, T.PAUSED, T.STOPPING_KILLED, T.COMPLETED, T.CANCELED, T.ERROR}
    ),
    # Paused by the experiment (keeps its slot) or at an ASHA rung (waits for a promotion).
    T.PAUSED: frozenset({T.QUEUED, T.STARTING, T.COMPLETED, T.CANCELED, T.ERROR}),
    T.STOPPING_COMPLETED: frozenset({T.STOPPING_KILLED, T.COMPLETED, T.CANCELED, T.ERROR}),
    T.STOPPING_CANCELED: frozenset({T.STOPPING_KILLED, T.CANCELED, T.ERROR}),
    # `det trial kill` of a running trial: whatever its process does next, it ends CANCELED.
    T.STOPPING_KILLED: frozenset({T.CANCELED, T.ERROR}),
    T.STOPPING_ERROR: frozenset({T.STOPPING_KILLED, T.ERROR}),
    T.COMPLETED: frozenset(),
    T.CANCELED: frozenset(),
    T.ERROR: frozenset(),
}

CHECKPOINT_MOVES: Mapping[str, frozenset[str]] = {
    "COMPLETED": frozenset({"DELETED"}),
    "DELETED": frozenset(),
}


def experiment_created(conn: Connection, experiment_id: int, state: ExperimentState, reason: str) -> None:
    _record(conn, "experiment", [(experiment_id, None)], state, reason)


def trial_created(conn: Connection, trial_id: int, state: TrialState, reason: str) -> None:
    _record(conn, "trial", [(trial_id, None)], state, reason)


def checkpoint_created(conn: Connection, uuid: str, reason: str) -> None:
    _record(conn, "checkpoint", [(uuid, None)], "COMPLETED", reason)


def move_experiment(
    conn: Connection, experiment: Row, to: ExperimentState, reason: str, **values: Any
) -> None:
    """Move one experiment (its row as read, under the caller's lock) to ``to``, with ``values``."""
    _move(conn, schema.experiments, "experiment", EXPERIMENT_MOVES, [experiment], E(to), reason, values)
    webhook_events.experiment_moved(conn, int(experiment.id), str(E(to)))


def move_trial(conn: Connection, trial: Row, to: TrialState, reason: str, **values: Any) -> None:
    """Move one trial (its row as read) to ``to``, with ``values`` written in the same UPDATE."""
    _move(conn, schema.trials, "trial", TRIAL_MOVES, [trial], T(to), reason, values)


def move_trials(
    conn: Connection, where: ColumnElement[bool], to: TrialState, reason: str, **values: Any
) -> list[int]:
    """Move every trial matching ``where`` that is not already ``to``; returns their ids."""
    trials = schema.trials
    rows = conn.execute(select(trials.c.id, trials.c.state).where(where, trials.c.state != to)).all()
    _move(conn, trials, "trial", TRIAL_MOVES, rows, T(to), reason, values)
    return [int(r.id) for r in rows]


def delete_checkpoint(conn: Connection, checkpoint: Row, reason: str) -> None:
    """Mark one COMPLETED checkpoint DELETED (its files are the caller's to remove)."""
    checkpoints = schema.checkpoints
    state = str(checkpoint.state)
    if "DELETED" not in CHECKPOINT_MOVES.get(state, frozenset()):
        raise StateError(f"checkpoint {checkpoint.uuid} is {state}; it cannot be deleted")
    done = conn.execute(
        checkpoints.update()
        .where(checkpoints.c.uuid == checkpoint.uuid, checkpoints.c.state == state)
        .values(state="DELETED")
    )
    if done.rowcount != 1:
        raise StateError(f"checkpoint {checkpoint.uuid} changed state meanwhile; try again")
    _record(conn, "checkpoint", [(checkpoint.uuid, state)], "DELETED", reason)


def history(conn: Connection, kind: str, object_id: int | str) -> list[dict[str, Any]]:
    """The object's state changes, oldest first: what `det e describe` and the API show."""
    changes = schema.state_changes
    rows = conn.execute(
        select(changes.c.from_state, changes.c.to_state, changes.c.time, changes.c.reason)
        .where(changes.c.kind == kind, changes.c.object_id == str(object_id))
        .order_by(changes.c.id)
    ).all()
    return [
        {"from": r.from_state, "to": r.to_state, "time": r.time.isoformat(), "reason": r.reason} for r in rows
    ]


def forget(conn: Connection, kind: str, object_ids: Iterable[int | str]) -> None:
    """Drop the history of deleted objects."""
    changes = schema.state_changes
    ids = [str(i) for i in object_ids]
    for start in range(0, len(ids), 500):
        conn.execute(
            changes.delete().where(changes.c.kind == kind, changes.c.object_id.in_(ids[start : start + 500]))
        )


def _move(
    conn: Connection,
    table: Table,
    kind: str,
    moves: Mapping[Any, frozenset[Any]],
    rows: Iterable[Row],
    to: Any,
    reason: str,
    values: dict[str, Any],
) -> None:
    by_state: dict[str, list[int]] = {}
    for row in rows:
        state = type(to)(row.state)
        if to not in moves[state]:
            raise StateError(f"{kind} {row.id} is {state}; it cannot become {to}")
        by_state.setdefault(str(state), []).append(int(row.id))
    for state, ids in by_state.items():
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            done = conn.execute(
                table.update().where(table.c.id.in_(chunk), table.c.state == state).values(state=to, **values)
            )
            if done.rowcount != len(chunk):
                # Another request moved one of them since it was read: nothing of this move stays.
                raise StateError(f"{kind} {chunk[0]} changed state meanwhile; try again")
        _record(conn, kind, [(i, state) for i in ids], to, reason)


def _record(
    conn: Connection, kind: str, objects: list[tuple[int | str, str | None]], to: str, reason: str
) -> None:
    if not objects:
        return
    at = now()
    conn.execute(
        schema.state_changes.insert(),
        [
            {
                "kind": kind,
                "object_id": str(i),
                "from_state": s,
                "to_state": str(to),
                "time": at,
                "reason": reason,
            }
            for i, s in objects
        ],
    )
