"""Webhook events: recorded in the transaction of the change that causes them.

An event is a row of ``det_webhook_deliveries``, written with the change (an experiment's state,
a metric report, an alert), so it exists exactly when the change does; ``webhook_sender`` POSTs it
later, never inside that request. Recording never fails the change: it runs in a savepoint, and a
failure is logged. Trial log lines are the exception: ``webhook_log_matcher`` matches them after
their insert has committed and records its events in a transaction of its own, so no regex runs
while a write lock is held. Threshold and log events happen once per trial and trigger. The event
sources test each change against this process's view of the webhooks (read again every few
seconds), so with no webhook of a kind a change costs no query.

One owner's webhooks may have at most MAX_PENDING_PER_OWNER events waiting to be sent; beyond that
a new event is recorded as given up, saying why, so a receiver that is down for long costs its
owner's events, never the master's memory or anyone else's deliveries.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Row, func, select

from det_airflow.master import schema, webhook_regex

STATE_CHANGE = "EXPERIMENT_STATE_CHANGE"
METRIC_THRESHOLD = "METRIC_THRESHOLD_EXCEEDED"
TASK_LOG = "TASK_LOG"
CUSTOM = "CUSTOM"
TRIGGER_TYPES = (STATE_CHANGE, METRIC_THRESHOLD, TASK_LOG, CUSTOM)
WORKSPACE, SPECIFIC = "WORKSPACE", "SPECIFIC"
COMPARE_OPS: Mapping[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
# How long a process trusts its view of the webhooks: another API server process may change them.
CACHE_SECONDS = 5.0
# Events of one owner's webhooks waiting to be sent, at most; a new one beyond is given up at once.
MAX_PENDING_PER_OWNER = 1000
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Armed:
    """A webhook as the event sources test it: its triggers by type, its regexes compiled by RE2."""

    id: int
    name: str
    owner: str
    mode: str
    experiments_of: str | None
    triggers: tuple[tuple[str, Mapping[str, Any]], ...]
    regexes: tuple[tuple[int, Any], ...]

    def of_type(self, kind: str) -> list[tuple[int, Mapping[str, Any]]]:
        return [(i, condition) for i, (t, condition) in enumerate(self.triggers) if t == kind]


_cache_lock = threading.Lock()
# The stored regexes RE2 refuses, (webhook id, trigger index), each logged once.
_unrunnable: set[tuple[int, int]] = set()
_cache: tuple[float, tuple[Armed, ...]] | None = None


def forget_cache() -> None:
    global _cache
    with _cache_lock:
        _cache = None


def armed(conn: Connection) -> tuple[Armed, ...]:
    """This process's view of the webhooks, read again after CACHE_SECONDS: a log line costs a
    dictionary look, not a query, and no regex is compiled twice."""
    global _cache
    with _cache_lock:
        if _cache is not None and _cache[0] > time.monotonic():
            return _cache[1]
    rows = conn.execute(select(schema.webhooks).order_by(schema.webhooks.c.id)).all()
    hooks = tuple(_arm(row) for row in rows)
    with _cache_lock:
        _cache = (time.monotonic() + CACHE_SECONDS, hooks)
    return hooks


def _arm(row: Row) -> Armed:
    triggers = tuple((str(t["triggerType"]), dict(t.get("condition") or {})) for t in row.triggers)
    regexes = []
    for i, (kind, condition) in enumerate(triggers):
        if kind != TASK_LOG:
            continue
        try:
            regexes.append((i, webhook_regex.compile_regex(str(condition["regex"]))))
        except webhook_regex.RegexRefused as exc:
            # Stored before regexes had to be RE2's: never run with a backtracking engine.
            if (row.id, i) not in _unrunnable:
                _unrunnable.add((row.id, i))
                log.warning(
                    "webhook %s: TASK_LOG regex %r is not matched: %s", row.id, condition["regex"], exc
                )
    return Armed(row.id, row.name, row.owner, row.mode, row.experiments_of, triggers, tuple(regexes))


def named_in(config: Mapping[str, Any]) -> tuple[set[str], set[int]]:
    """The webhook names and ids an experiment config lists under ``integrations.webhooks``."""
    integrations = config.get("integrations") or {}
    listed = integrations.get("webhooks") or {} if isinstance(integrations, Mapping) else {}
    if not isinstance(listed, Mapping):
        return set(), set()
    names = {str(n) for n in listed.get("webhook_name") or []}
    ids = {int(i) for i in listed.get("webhook_id") or [] if isinstance(i, int)}
    return names, ids


def watches(hook: Armed, experiment: Row) -> bool:
    """Whether ``hook`` fires for ``experiment``'s events."""
    if hook.mode == WORKSPACE:
        return True
    if hook.experiments_of is not None and hook.experiments_of != experiment.owner:
        return False
    names, ids = named_in(experiment.config or {})
    return hook.name in names or hook.id in ids


def _candidates(conn: Connection, kind: str) -> list[Armed]:
    return [hook for hook in armed(conn) if hook.of_type(kind)]


def experiment_row(conn: Connection, experiment_id: int) -> Row | None:
    e = schema.experiments
    return conn.execute(
        select(e.c.id, e.c.name, e.c.owner, e.c.state, e.c.config, e.c.resource_pool, e.c.start_time).where(
            e.c.id == experiment_id
        )
    ).first()


def aware(value: datetime) -> datetime:
    """``value`` in UTC: SQLite hands back naive datetimes for what was stored as UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _safely(conn: Connection, recorder: Callable[..., object], *args: Any) -> None:
    """Run ``recorder`` in a savepoint: an event that cannot be recorded is logged, and the change
    that caused it stands."""
    try:
        with conn.begin_nested():
            recorder(conn, *args)
    except Exception:  # noqa: BLE001 - a webhook's event never fails the change it reports
        log.exception("could not record a webhook event (%s)", getattr(recorder, "__name__", recorder))


def experiment_payload(experiment: Row, state: str) -> dict[str, Any]:
    config = experiment.config or {}
    resources = config.get("resources") or {}
    started: datetime | None = experiment.start_time
    return {
        "id": experiment.id,
        "state": state,
        "name": experiment.name,
        "owner": experiment.owner,
        "duration": int((datetime.now(UTC) - aware(started)).total_seconds()) if started else 0,
        "resource_pool": experiment.resource_pool,
        "slots": resources.get("slots_per_trial", 0),
        "workspace": config.get("workspace") or "Uncategorized",
        "project": config.get("project") or "Uncategorized",
    }


def record(
    conn: Connection,
    hook: Armed,
    kind: str,
    condition: Mapping[str, Any],
    experiment_id: int | None,
    data: dict[str, Any],
    event_key: str | None = None,
) -> None:
    """Store one event of ``hook`` for the sender; an event ``event_key`` names is stored once."""
    table = schema.webhook_deliveries
    if event_key is not None:
        seen = select(table.c.id).where(table.c.webhook_id == hook.id, table.c.event_key == event_key)
        if conn.execute(seen).first() is not None:
            return
    at = datetime.now(UTC)
    full = _pending_of(conn, hook.owner) >= MAX_PENDING_PER_OWNER
    refused = (
        f"not sent: {MAX_PENDING_PER_OWNER} events of {hook.owner}'s webhooks were already waiting to be sent"
    )
    payload = {
        "event_id": str(uuid.uuid4()),
        "event_type": kind,
        "timestamp": int(at.timestamp()),
        "condition": dict(condition),
        "event_data": data,
    }
    conn.execute(
        table.insert().values(
            webhook_id=hook.id,
            trigger_type=kind,
            experiment_id=experiment_id,
            event_key=event_key,
            payload=payload,
            created_at=at,
            attempts=0,
            next_attempt_at=at,
            gave_up_at=at if full else None,
            last_error=refused if full else None,
        )
    )


def _pending_of(conn: Connection, owner: str) -> int:
    d, w = schema.webhook_deliveries, schema.webhooks
    waiting = (
        select(func.count())
        .select_from(d.join(w, w.c.id == d.c.webhook_id))
        .where(w.c.owner == owner, d.c.delivered_at.is_(None), d.c.gave_up_at.is_(None))
    )
    return int(conn.execute(waiting).scalar() or 0)


def experiment_moved(conn: Connection, experiment_id: int, state: str) -> None:
    """Record an event for each webhook whose state trigger ``state`` meets."""
    hooks = _candidates(conn, STATE_CHANGE)
    if hooks:
        _safely(conn, _experiment_moved, hooks, experiment_id, state)


def _experiment_moved(conn: Connection, hooks: list[Armed], experiment_id: int, state: str) -> None:
    experiment = experiment_row(conn, experiment_id)
    if experiment is None:
        return
    for hook in hooks:
        matching = [c for _, c in hook.of_type(STATE_CHANGE) if c.get("state") == state]
        if matching and watches(hook, experiment):
            data = {"experiment": experiment_payload(experiment, state)}
            record(conn, hook, STATE_CHANGE, matching[0], experiment_id, data)


def metrics_reported(
    conn: Connection, experiment_id: int, trial_id: int, reports: list[tuple[str, int, Mapping[str, Any]]]
) -> None:
    """Record an event the first time a trial's ``(group, steps, metrics)`` reports cross a threshold."""
    hooks = _candidates(conn, METRIC_THRESHOLD)
    if hooks:
        _safely(conn, _metrics_reported, hooks, experiment_id, trial_id, reports)


def _metrics_reported(
    conn: Connection,
    hooks: list[Armed],
    experiment_id: int,
    trial_id: int,
    reports: list[tuple[str, int, Mapping[str, Any]]],
) -> None:
    experiment = experiment_row(conn, experiment_id)
    if experiment is None:
        return
    for hook in hooks:
        if not watches(hook, experiment):
            continue
        for index, condition in hook.of_type(METRIC_THRESHOLD):
            crossed = _first_crossing(condition, reports)
            if crossed is not None:
                steps, value = crossed
                data = {
                    "experiment": experiment_payload(experiment, experiment.state),
                    "trial_id": trial_id,
                    "metric": {
                        "name": condition["metricName"],
                        "group": condition["metricGroup"],
                        "value": value,
                        "steps_completed": steps,
                    },
                }
                key = f"metric:{trial_id}:{index}"
                record(conn, hook, METRIC_THRESHOLD, condition, experiment_id, data, key)


def _first_crossing(
    condition: Mapping[str, Any], reports: list[tuple[str, int, Mapping[str, Any]]]
) -> tuple[int, float] | None:
    compare = COMPARE_OPS[condition["compareOp"]]
    for group, steps, values in reports:
        value = values.get(condition["metricName"])
        if group != condition["metricGroup"] or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if compare(float(value), float(condition["value"])):
            return steps, float(value)
    return None


def alert_raised(conn: Connection, trial_id: int, *, title: str, description: str, level: str) -> int:
    """Record an event for each CUSTOM webhook watching the trial's experiment; answers how many."""
    hooks = _candidates(conn, CUSTOM)
    if not hooks:
        return 0
    t = schema.trials
    experiment_id = conn.execute(select(t.c.experiment_id).where(t.c.id == trial_id)).scalar()
    experiment = experiment_row(conn, int(experiment_id)) if experiment_id is not None else None
    if experiment is None:
        return 0
    count = 0
    for hook in hooks:
        if watches(hook, experiment):
            data = {
                "experiment": experiment_payload(experiment, experiment.state),
                "trial_id": trial_id,
                "data": {"title": title, "description": description, "level": level},
            }
            record(conn, hook, CUSTOM, {}, experiment.id, data)
            count += 1
    return count
