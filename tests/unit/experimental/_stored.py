"""What the master stored for unmanaged runs, read from its database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from det_airflow.master import schema
from det_airflow.master.db import Database


def experiments(db: Database) -> list[tuple[str, str, str | None, str | None]]:
    """(owner, state, dag_id, error) of every experiment."""
    table = schema.experiments
    with db.read() as conn:
        rows = conn.execute(select(table).order_by(table.c.id)).all()
    return [(r.owner, r.state, r.dag_id, r.error) for r in rows]


def trials(db: Database) -> list[tuple[str, dict, int, str | None]]:
    """(state, hparams, total_batches, latest_checkpoint) of every trial."""
    table = schema.trials
    with db.read() as conn:
        rows = conn.execute(select(table).order_by(table.c.id)).all()
    return [(r.state, r.hparams, r.total_batches, r.latest_checkpoint) for r in rows]


def logs(db: Database) -> list[tuple[str, str]]:
    """(stdtype, message) of every trial log line, in order."""
    table = schema.trial_logs
    with db.read() as conn:
        return [(r.stdtype, r.message) for r in conn.execute(select(table).order_by(table.c.id))]


def ranked_logs(db: Database) -> list[tuple[int | None, str, str]]:
    """(rank, stdtype, message) of every trial log line, in order."""
    table = schema.trial_logs
    with db.read() as conn:
        return [(r.rank, r.stdtype, r.message) for r in conn.execute(select(table).order_by(table.c.id))]


def metrics(db: Database, group: str) -> list[tuple[int, dict[str, Any]]]:
    """(steps_completed, metrics) of every report of ``group``, in order."""
    table = schema.metrics
    with db.read() as conn:
        rows = conn.execute(select(table).where(table.c.group == group).order_by(table.c.id)).all()
    return [(r.steps_completed, r.metrics) for r in rows]
