"""Delivery of recorded webhook events, away from the requests that caused them.

Housekeeping's ``deliver webhooks`` job hands :func:`deliver_due` to one thread of its own, so a slow
or silent receiver holds up neither a request nor the other jobs. Each event is claimed before its
POST (a compare-and-swap on its attempt count), so API server processes sharing the database never
send the same event together. A failed POST is tried again after 1, 2, 4 ... seconds, at most
MAX_BACKOFF_SECONDS apart, until GIVE_UP_AFTER has passed since the event; then it is marked given up.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from det_airflow.master import schema
from det_airflow.master.db import Database
from det_airflow.master.lifecycle import now
from det_airflow.master.webhook_events import aware
from det_airflow.webhook_notifier import DeliveryFailed, DetWebhookNotifier

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 300.0
GIVE_UP_AFTER = timedelta(hours=24)
# Longer than one POST may take: a claim older than this belongs to a process that stopped.
CLAIM_SECONDS = 60.0
TIMEOUT_SECONDS = 10.0
BATCH = 100


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed try."""
    return timedelta(seconds=min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, attempts - 1)))


def deliver_due(db: Database, *, at: datetime | None = None) -> int:
    """POST every event due at ``at`` (default now), oldest first; answers how many were delivered."""
    delivered = 0
    while True:
        claimed = _claim(db, at or now())
        if not claimed:
            return delivered
        for delivery in claimed:
            delivered += _send(db, delivery, at)


def _claim(db: Database, at: datetime) -> list[Any]:
    d, w = schema.webhook_deliveries, schema.webhooks
    with db.begin() as conn:
        due = conn.execute(
            select(d.c.id, d.c.attempts, d.c.next_attempt_at, d.c.created_at, d.c.payload, w.c.url)
            .add_columns(w.c.webhook_type, w.c.signing_key)
            .join(w, w.c.id == d.c.webhook_id)
            .where(d.c.delivered_at.is_(None), d.c.gave_up_at.is_(None), d.c.next_attempt_at <= at)
            .order_by(d.c.id)
            .limit(BATCH)
        ).all()
        claimed = []
        for row in due:
            done = conn.execute(
                d.update()
                .where(d.c.id == row.id, d.c.attempts == row.attempts)
                .values(attempts=row.attempts + 1, next_attempt_at=at + timedelta(seconds=CLAIM_SECONDS))
            )
            if done.rowcount == 1:
                claimed.append(row)
    return claimed


def _send(db: Database, delivery: Any, at: datetime | None) -> int:
    notifier = DetWebhookNotifier(
        url=delivery.url,
        signing_key=delivery.signing_key,
        event=delivery.payload,
        webhook_type=delivery.webhook_type,
        timeout=TIMEOUT_SECONDS,
    )
    d = schema.webhook_deliveries
    try:
        notifier.notify({})
    except DeliveryFailed as exc:
        when = at or now()
        attempts = delivery.attempts + 1
        gave_up = when - aware(delivery.created_at) >= GIVE_UP_AFTER
        with db.begin() as conn:
            conn.execute(
                d.update()
                .where(d.c.id == delivery.id)
                .values(
                    last_error=str(exc),
                    next_attempt_at=when + backoff(attempts),
                    gave_up_at=when if gave_up else None,
                )
            )
        log.warning("webhook delivery %s failed (try %s): %s", delivery.id, attempts, exc)
        return 0
    with db.begin() as conn:
        conn.execute(
            d.update().where(d.c.id == delivery.id).values(delivered_at=at or now(), last_error=None)
        )
    return 1


def _any_due(db: Database) -> bool:
    d = schema.webhook_deliveries
    with db.read() as conn:
        due = d.c.delivered_at.is_(None), d.c.gave_up_at.is_(None), d.c.next_attempt_at <= now()
        return conn.execute(select(d.c.id).where(*due).limit(1)).first() is not None


_busy = threading.Lock()


def deliver_in_background(db: Database) -> bool:
    """Start :func:`deliver_due` on its own thread when an event is due and none runs; answers
    whether it started one."""
    if not _any_due(db) or not _busy.acquire(blocking=False):
        return False

    def run() -> None:
        try:
            deliver_due(db)
        except Exception:  # noqa: BLE001 - logged; the next turn tries again
            log.exception("webhook delivery failed; it runs again at the next turn")
        finally:
            _busy.release()

    threading.Thread(target=run, name="det-webhook-sender", daemon=True).start()
    return True
