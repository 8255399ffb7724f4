"""Trial log lines matched against TASK_LOG webhooks' regexes, after the lines are stored.

:func:`logs_appended` is called in the transaction that inserts a trial's lines. It only notes
them, and hands them to this process's matcher thread when that transaction commits (and forgets
them when it rolls back). The thread matches them with RE2 (``webhook_regex``), on a bounded prefix
of each line, against the regexes of the webhooks that watch the trial's experiment only, then
records the events in a short transaction of its own. So no regex runs inside a request or while a
write lock is held, one user's regex never runs on another's lines, and a trigger that has fired
for a trial is not matched again.

The queue is bounded: should lines arrive faster than they are matched, the batches beyond
QUEUE_BATCHES, or beyond QUEUE_CHARS characters waiting, go unmatched (and logged); the lines
themselves are stored all the same.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event, select

from det_airflow.master import schema, webhook_events, webhook_regex
from det_airflow.master.db import get_database

QUEUE_BATCHES = 1000
QUEUE_CHARS = 32 << 20
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Batch:
    engine: Engine  # the database the lines were stored in
    trial_id: int
    lines: tuple[str, ...]

    @property
    def chars(self) -> int:
        return sum(len(line) for line in self.lines)


_ready = threading.Condition()
_batches: collections.deque[_Batch] = collections.deque()
_unfinished = 0
_queued_chars = 0
_thread: threading.Thread | None = None


def logs_appended(conn: Connection, trial_id: int, messages: Iterable[str]) -> None:
    """Note ``messages``, just inserted in ``conn``'s transaction, for matching once it commits.
    With no TASK_LOG webhook this costs a look at this process's cached view of the webhooks."""
    if not any(hook.regexes for hook in webhook_events.armed(conn)):
        return
    batch = _Batch(conn.engine, trial_id, tuple(m[: webhook_regex.MAX_MATCHED_CHARS] for m in messages))
    settled = threading.Event()

    def committed(_conn: Connection) -> None:
        if not settled.is_set():
            settled.set()
            _enqueue(batch)

    event.listen(conn, "commit", committed, once=True)
    event.listen(conn, "rollback", lambda _conn: settled.set(), once=True)


def wait_matched(timeout: float) -> bool:
    """Wait until every batch handed over so far has been matched and its events recorded;
    answers whether that happened within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with _ready:
        while _unfinished:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _ready.wait(left)
    return True


def _enqueue(batch: _Batch) -> None:
    global _thread, _unfinished, _queued_chars
    with _ready:
        if _unfinished >= QUEUE_BATCHES or _queued_chars + batch.chars > QUEUE_CHARS:
            log.warning(
                "trial %s: %s log lines not matched against webhooks: too many waiting",
                batch.trial_id,
                len(batch.lines),
            )
            return
        _batches.append(batch)
        _unfinished += 1
        _queued_chars += batch.chars
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="det-webhook-log-matcher", daemon=True)
            _thread.start()
        _ready.notify_all()


def _run() -> None:
    global _unfinished, _queued_chars
    while True:
        with _ready:
            while not _batches:
                _ready.wait()
            batch = _batches.popleft()
        try:
            _match(batch)
        except Exception:  # noqa: BLE001 - a webhook's event never costs the lines or the thread
            log.exception("could not match trial %s's log lines against webhooks", batch.trial_id)
        finally:
            with _ready:
                _unfinished -= 1
                _queued_chars -= batch.chars
                _ready.notify_all()


def _match(batch: _Batch) -> None:
    db = get_database()
    if db.engine is not batch.engine:
        return  # stored in a database this process no longer uses
    found = _watching(db, batch.trial_id)
    if found is None:
        return
    experiment_id, hooks, fired = found
    matched = []
    for hook in hooks:
        for index, pattern in hook.regexes:
            key = _key(batch.trial_id, index)
            if (hook.id, key) in fired:
                continue
            line = next((m for m in batch.lines if webhook_regex.search(pattern, m)), None)
            if line is not None:
                matched.append((hook, pattern, line, key))
    if not matched:
        return
    with db.begin() as conn:
        experiment = webhook_events.experiment_row(conn, experiment_id)
        if experiment is None:
            return
        for hook, pattern, line, key in matched:
            data = {
                "experiment": webhook_events.experiment_payload(experiment, experiment.state),
                "trial_id": batch.trial_id,
                "log": line,
            }
            condition = {"regex": pattern.pattern}
            webhook_events.record(conn, hook, webhook_events.TASK_LOG, condition, experiment.id, data, key)


def _watching(db: Any, trial_id: int) -> tuple[int, list[webhook_events.Armed], set[tuple[int, str]]] | None:
    """The trial's experiment, the webhooks with regexes that watch it, and which of their
    triggers have fired for the trial already."""
    t, d = schema.trials, schema.webhook_deliveries
    with db.read() as conn:
        experiment_id = conn.execute(select(t.c.experiment_id).where(t.c.id == trial_id)).scalar()
        experiment = (
            webhook_events.experiment_row(conn, int(experiment_id)) if experiment_id is not None else None
        )
        if experiment is None:
            return None
        hooks = [h for h in webhook_events.armed(conn) if h.regexes and webhook_events.watches(h, experiment)]
        if not hooks:
            return None
        keys = {_key(trial_id, index) for hook in hooks for index, _ in hook.regexes}
        fired = conn.execute(
            select(d.c.webhook_id, d.c.event_key).where(
                d.c.webhook_id.in_([h.id for h in hooks]), d.c.event_key.in_(keys)
            )
        ).all()
    return int(experiment.id), hooks, {(int(w), str(k)) for w, k in fired}


def _key(trial_id: int, index: int) -> str:
    return f"log:{trial_id}:{index}"
