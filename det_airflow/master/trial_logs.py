"""A trial's log lines: stored as its processes send them, read back by people, and deleted once
the trial has been over for longer than its experiment's ``retention_policy.log_retention_days``.
TASK_LOG webhooks see the lines once their insert has committed (``webhook_log_matcher``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, delete, exists, select

from det_airflow.master import schema, webhook_log_matcher
from det_airflow.master.db import Database
from det_airflow.master.lifecycle import now
from det_airflow.states import TERMINAL_TRIAL_STATES

# Trials whose lines one statement deletes: SQLite holds its write lock for the whole statement.
_DELETE_BATCH = 200


def reported_time(value: Any) -> datetime:
    """The time a report gives in ISO 8601 (no zone: UTC), else now; always in UTC.

    UTC throughout because SQLite keeps a time without its zone: lines are compared by their
    stored time (``timestamp_before``/``timestamp_after``), which only works in one zone."""
    if isinstance(value, str):
        try:
            return as_utc(datetime.fromisoformat(value))
        except ValueError:
            pass
    return now()


def as_utc(when: datetime) -> datetime:
    """``when`` in UTC; a time without a zone is taken to be UTC already."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def time_window(before: datetime | None, after: datetime | None) -> list[ColumnElement[bool]]:
    """The conditions that keep lines logged strictly between ``after`` and ``before`` (either open),
    as Determined's ``timestamp_before``/``timestamp_after`` do."""
    column = schema.trial_logs.c.timestamp
    where: list[ColumnElement[bool]] = []
    if before is not None:
        where.append(column < as_utc(before))
    if after is not None:
        where.append(column > as_utc(after))
    return where


# Who wrote a line (Determined's log ``source``): the trial's own processes, or the master about it.
SOURCES = ("task", "master")


def append_logs(
    conn: Connection, trial_id: int, lines: list[dict[str, Any]], *, source: str = "master"
) -> None:
    """Stores the lines; ``source`` is "task" for what the trial's processes sent, else the
    master wrote them (preemption, lost runs)."""
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
                "source": source,
            }
            for line in lines
        ],
    )
    # Matched after the commit, on the matcher's thread: no regex runs inside this transaction.
    webhook_log_matcher.logs_appended(conn, trial_id, (str(line.get("message", "")) for line in lines))


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


def retention_days(config: Any, default: int) -> int:
    """Days an experiment keeps its ended trials' logs: its config's ``retention_policy
    .log_retention_days``, else ``default``; -1: forever. Configs stored before the field existed
    have no ``retention_policy``."""
    policy = config.get("retention_policy") if isinstance(config, dict) else None
    days = policy.get("log_retention_days") if isinstance(policy, dict) else None
    return default if days is None else int(days)


def delete_expired_logs(db: Database, default_days: int, *, at: datetime | None = None) -> int:
    """Deletes the log lines of trials that ended more than their experiment's retention days
    before ``at`` (now); answers how many lines went. A trial that has not ended keeps its logs."""
    trials, logs = schema.trials, schema.trial_logs
    ended = trials.c.state.in_([str(s) for s in TERMINAL_TRIAL_STATES])
    with_logs = (ended, trials.c.end_time.is_not(None), exists().where(logs.c.trial_id == trials.c.id))
    at = at or now()
    with db.read() as conn:  # looks first: most turns find nothing to delete and write nothing
        having_logs = conn.execute(select(trials.c.experiment_id).distinct().where(*with_logs)).scalars()
        configs = conn.execute(
            select(schema.experiments.c.id, schema.experiments.c.config).where(
                schema.experiments.c.id.in_(list(having_logs))
            )
        ).all()
        by_days: dict[int, list[int]] = {}
        for experiment_id, config in configs:
            days = retention_days(config, default_days)
            if days >= 0:
                by_days.setdefault(days, []).append(experiment_id)
        expired = [
            trial_id
            for days, experiment_ids in sorted(by_days.items())
            for trial_id in conn.execute(
                select(trials.c.id).where(
                    trials.c.experiment_id.in_(experiment_ids),
                    trials.c.end_time < at - timedelta(days=days),
                    *with_logs,
                )
            ).scalars()
        ]
    deleted = 0
    for start in range(0, len(expired), _DELETE_BATCH):
        batch = expired[start : start + _DELETE_BATCH]
        still_ended = select(trials.c.id).where(trials.c.id.in_(batch), ended)  # not restarted since
        with db.begin() as conn:
            deleted += conn.execute(delete(logs).where(logs.c.trial_id.in_(still_ended))).rowcount
    return deleted
