"""Delivery of recorded webhook events, away from the requests that caused them.

Housekeeping's ``deliver webhooks`` job calls :func:`deliver_in_background` every second. It starts
one sender thread per webhook owner with events due (at most MAX_SENDERS at once in a process),
so one owner's slow or silent receiver delays that owner's deliveries only. A sender POSTs its
owner's events oldest first, each within TIMEOUT_SECONDS in all, and gives its place up after
PER_TURN of them. Each event is claimed before its POST (a compare-and-swap on its attempt count),
so API server processes sharing the database never send the same event together. A failed POST is
tried again after 1, 2, 4 ... seconds, at most MAX_BACKOFF_SECONDS apart, until GIVE_UP_AFTER has
passed since the event; then it is marked given up.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from det_airflow.master import schema
from det_airflow.master.db import Database
from det_airflow.master.lifecycle import now
from det_airflow.master.webhook_events import aware
from det_airflow.webhook_notifier import DeliveryFailed, DetWebhookNotifier

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 300.0
GIVE_UP_AFTER = timedelta(hours=24)
# Seconds one POST may take in all: connecting, TLS, sending and the answer's status line.
TIMEOUT_SECONDS = 5.0
# Longer than resolving a name and one POST: a claim older than this belongs to a process that stopped.
CLAIM_SECONDS = 60.0
# Owners whose events one process sends at once, and the events a sender sends before it makes way.
MAX_SENDERS = 32
PER_TURN = 50
# Due events looked at per claim: others' claims may take some first.
_CANDIDATES = 10


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed try."""
    return timedelta(seconds=min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, attempts - 1)))


def deliver_due(
    db: Database, *, at: datetime | None = None, owner: str | None = None, limit: int | None = None
) -> int:
    """POST every event due at ``at`` (default now), oldest first, of ``owner``'s webhooks (default:
    everyone's), at most ``limit`` of them; answers how many were delivered."""
    delivered = tried = 0
    while limit is None or tried < limit:
        claimed = _claim(db, at or now(), owner)
        if claimed is None:
            break
        delivered += _send(db, claimed, at)
        tried += 1
    return delivered


def _due(at: datetime) -> tuple[Any, ...]:
    d = schema.webhook_deliveries
    return d.c.delivered_at.is_(None), d.c.gave_up_at.is_(None), d.c.next_attempt_at <= at


def _claim(db: Database, at: datetime, owner: str | None) -> Any | None:
    """The oldest due event (of ``owner``'s webhooks), claimed by this process; None if none is left."""
    d, w = schema.webhook_deliveries, schema.webhooks
    query = (
        select(d.c.id, d.c.attempts, d.c.created_at, d.c.payload, w.c.url, w.c.webhook_type, w.c.signing_key)
        .join(w, w.c.id == d.c.webhook_id)
        .where(*_due(at))
        .order_by(d.c.id)
        .limit(_CANDIDATES)
    )
    if owner is not None:
        query = query.where(w.c.owner == owner)
    with db.begin() as conn:
        for row in conn.execute(query).all():
            done = conn.execute(
                d.update()
                .where(d.c.id == row.id, d.c.attempts == row.attempts)
                .values(attempts=row.attempts + 1, next_attempt_at=at + timedelta(seconds=CLAIM_SECONDS))
            )
            if done.rowcount == 1:
                return row
    return None


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
        # The cause (refused, reset, timed out...) is for the admin's log only; the owner sees the
        # message, which tells no port or host that answers from one that does not.
        log.warning("webhook delivery %s failed (try %s): %s %s", delivery.id, attempts, exc, exc.cause)
        return 0
    with db.begin() as conn:
        conn.execute(
            d.update().where(d.c.id == delivery.id).values(delivered_at=at or now(), last_error=None)
        )
    return 1


def _owners_due(db: Database) -> list[str]:
    """The owners of webhooks with events due, the one waiting longest first."""
    d, w = schema.webhook_deliveries, schema.webhooks
    with db.read() as conn:
        rows = conn.execute(
            select(w.c.owner)
            .join(d, d.c.webhook_id == w.c.id)
            .where(*_due(now()))
            .group_by(w.c.owner)
            .order_by(func.min(d.c.id))
        ).all()
    return [str(row.owner) for row in rows]


_senders_lock = threading.Lock()
_senders: set[str] = set()


def deliver_in_background(db: Database) -> bool:
    """Start a sender thread for each owner with events due that has none in this process (at most
    MAX_SENDERS at once); answers whether it started one."""
    started = False
    for owner in _owners_due(db):
        with _senders_lock:
            if owner in _senders or len(_senders) >= MAX_SENDERS:
                continue
            _senders.add(owner)
        threading.Thread(target=_sender, args=(db, owner), name="det-webhook-sender", daemon=True).start()
        started = True
    return started


def _sender(db: Database, owner: str) -> None:
    try:
        deliver_due(db, owner=owner, limit=PER_TURN)
    except Exception:  # noqa: BLE001 - logged; the next turn tries again
        log.exception("webhook delivery of %s's events failed; it runs again at the next turn", owner)
    finally:
        with _senders_lock:
            _senders.discard(owner)
