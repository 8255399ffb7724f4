"""A trial's log lines: stored as its processes send them, read back by people."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, select

from det_airflow.master import schema
from det_airflow.master.lifecycle import now


def reported_time(value: Any) -> datetime:
    """The time a report gives in ISO 8601, else now."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return now()


def append_logs(conn: Connection, trial_id: int, lines: list[dict[str, Any]]) -> None:
    if not lines:
        return
    conn.execute(
        schema.trial_logs.insert(),
        [
            {
                "trial_id": trial_id,
                "timestamp": reported_time(line.get("timestamp")),
                "container_id": line.get("container_id"),
                "rank": line.get("rank"),
                "level": line.get("level") or "INFO",
                "stdtype": line.get("stdtype") or "stdout",
                "message": str(line.get("message", "")),
            }
            for line in lines
        ],
    )


def read_logs(
    conn: Connection,
    trial_id: int,
    *,
    after: int | None,
    limit: int | None,
    tail: int | None,
    where: Sequence[ColumnElement[bool]] = (),
) -> list[Row]:
    table = schema.trial_logs
    query = select(table).where(table.c.trial_id == trial_id, *where)
    if after is not None:
        query = query.where(table.c.id > after)
    if tail is not None:
        rows = conn.execute(query.order_by(table.c.id.desc()).limit(tail)).all()
        return list(reversed(rows))
    query = query.order_by(table.c.id)
    if limit is not None:
        query = query.limit(limit)
    return list(conn.execute(query).all())
