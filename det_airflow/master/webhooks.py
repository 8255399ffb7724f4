"""Webhooks (Determined's ``det webhook``): where the master POSTs which events, and the events.

A webhook has triggers: an experiment reaching a state, a metric crossing a threshold, a trial log
line matching a regex, or an alert the training code raises (``core_context.alert``). Its mode says
which experiments it watches: WORKSPACE, every experiment (set by admins only, as there is one
workspace); SPECIFIC, the experiments whose config names it under ``integrations.webhooks``. A
SPECIFIC webhook set by someone not an admin watches that person's experiments only, so nobody sends
another's experiment to an address of their choosing.

Webhooks cannot be turned against the master or other users: a URL must resolve to public addresses
only unless an admin allows its host (``webhook_address``), a regex must be one RE2 runs in linear
time (``webhook_regex``), and every stored string has a bound.

What makes a webhook fire is recorded by ``webhook_events``; ``webhook_sender`` POSTs it.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow import webhook_address
from det_airflow.errors import DetError
from det_airflow.master import schema, webhook_events, webhook_regex
from det_airflow.master.authz import Caller, PermissionDenied
from det_airflow.master.lifecycle import NotFound, now
from det_airflow.master.webhook_events import (
    COMPARE_OPS,
    METRIC_THRESHOLD,
    SPECIFIC,
    STATE_CHANGE,
    TASK_LOG,
    TRIGGER_TYPES,
    WORKSPACE,
)
from det_airflow.states import ExperimentState

WEBHOOK_TYPES = ("DEFAULT", "SLACK")
MODES = (WORKSPACE, SPECIFIC)
MAX_NAME = 256
MAX_REGEX = 1000
MAX_METRIC_NAME = 256
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class WebhookError(DetError):
    """A webhook the master refuses: bad name, address or trigger (HTTP 400)."""


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise WebhookError(
            f"webhook name {name!r}: 1 to {MAX_NAME} letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_url(url: str) -> str:
    """``url`` if it is an http(s) address with a host and no user name or password; where it
    resolves is checked by :func:`check_destination`."""
    try:
        webhook_address.check_shape(url)
    except webhook_address.AddressRefused as exc:
        raise WebhookError(str(exc)) from None
    return url


def check_destination(url: str) -> None:
    """Refuse ``url`` unless its host resolves to public addresses only or an admin allows it."""
    try:
        webhook_address.resolve(url, webhook_address.admin_allowed())
    except webhook_address.AddressRefused as exc:
        raise WebhookError(str(exc)) from None


def check_choice(field: str, value: str, choices: Iterable[str]) -> str:
    upper = value.upper()
    if upper not in choices:
        raise WebhookError(f"webhook {field} {value!r}: one of {', '.join(choices)}")
    return upper


def check_triggers(triggers: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The triggers as stored: ``{"triggerType", "condition"}`` with each condition checked."""
    if not triggers:
        raise WebhookError("a webhook needs at least one trigger")
    return [_check_trigger(i, t) for i, t in enumerate(triggers)]


def _check_trigger(index: int, trigger: Mapping[str, Any]) -> dict[str, Any]:
    where = f"trigger {index + 1}"
    kind = check_choice(f"{where} triggerType", str(trigger.get("triggerType", "")), TRIGGER_TYPES)
    condition = trigger.get("condition") or {}
    if not isinstance(condition, Mapping):
        raise WebhookError(f"{where}: condition is a mapping, not {type(condition).__name__}")
    if kind == STATE_CHANGE:
        state = str(condition.get("state", ""))
        if state not in {s.value for s in ExperimentState}:
            raise WebhookError(f"{where}: condition.state {state!r} is not an experiment state")
        return {"triggerType": kind, "condition": {"state": state}}
    if kind == METRIC_THRESHOLD:
        name, op, value = condition.get("metricName"), condition.get("compareOp"), condition.get("value")
        group = condition.get("metricGroup", "validation")
        if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
            raise WebhookError(
                f"{where}: condition.metricName names a metric in 1 to {MAX_METRIC_NAME} characters"
            )
        if op not in COMPARE_OPS:
            raise WebhookError(f"{where}: condition.compareOp {op!r}: one of {', '.join(COMPARE_OPS)}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WebhookError(f"{where}: condition.value {value!r} is not a number")
        if group not in ("training", "validation"):
            raise WebhookError(f"{where}: condition.metricGroup {group!r}: training or validation")
        return {
            "triggerType": kind,
            "condition": {"metricName": name, "metricGroup": group, "compareOp": op, "value": float(value)},
        }
    if kind == TASK_LOG:
        regex = condition.get("regex")
        if not isinstance(regex, str) or not regex or len(regex) > MAX_REGEX:
            raise WebhookError(
                f"{where}: condition.regex is a regular expression of 1 to {MAX_REGEX} characters"
            )
        try:
            webhook_regex.compile_regex(regex)
        except webhook_regex.RegexRefused as exc:
            raise WebhookError(
                f"{where}: condition.regex {regex!r} does not compile with RE2, which matches in linear "
                f"time (no backreferences or lookarounds): {exc}"
            ) from None
        return {"triggerType": kind, "condition": {"regex": regex}}
    return {"triggerType": kind, "condition": {}}


@dataclass(frozen=True)
class NewWebhook:
    """A webhook as asked for, checked: what :func:`create` stores."""

    name: str
    url: str
    webhook_type: str
    mode: str
    triggers: list[dict[str, Any]]


def check_new(
    caller: Caller,
    *,
    name: str,
    url: str,
    webhook_type: str,
    mode: str,
    triggers: list[Mapping[str, Any]],
) -> NewWebhook:
    """The webhook ``caller`` asks for, checked: its fields, the caller's right (everyone may set
    SPECIFIC ones, admins any) and, last, where its URL resolves. Call it outside any transaction:
    resolving a name may take seconds."""
    name, url = check_name(name), check_url(url)
    webhook_type = check_choice("webhookType", webhook_type, WEBHOOK_TYPES)
    mode = check_choice("mode", mode, MODES)
    stored = check_triggers(triggers)
    if not caller.is_admin:
        if mode == WORKSPACE:
            raise PermissionDenied(
                f"user '{caller.name}' may not create WORKSPACE webhook '{name}': only admins may; "
                "use mode SPECIFIC for your own experiments"
            )
        if not caller.may_create_runs():
            raise PermissionDenied(
                f"user '{caller.name}' may not create webhook '{name}': needs the right to create DAG runs"
            )
    check_destination(url)
    return NewWebhook(name, url, webhook_type, mode, stored)


def create(conn: Connection, caller: Caller, new: NewWebhook) -> Row:
    """Store a webhook checked by :func:`check_new`, with a new signing key."""
    table = schema.webhooks
    if conn.execute(select(table.c.id).where(table.c.name == new.name)).first() is not None:
        raise WebhookError(f"webhook '{new.name}' already exists")
    conn.execute(
        table.insert().values(
            name=new.name,
            url=new.url,
            webhook_type=new.webhook_type,
            mode=new.mode,
            triggers=new.triggers,
            signing_key=secrets.token_hex(32),
            owner=caller.name,
            experiments_of=None if caller.is_admin else caller.name,
            created_at=now(),
        )
    )
    webhook_events.forget_cache()
    return conn.execute(select(table).where(table.c.name == new.name)).one()


def get_webhook(conn: Connection, webhook_id: int) -> Row:
    row = conn.execute(select(schema.webhooks).where(schema.webhooks.c.id == webhook_id)).first()
    if row is None:
        raise NotFound(f"webhook {webhook_id} not found")
    return row


def _sees(caller: Caller, row: Row) -> bool:
    return caller.is_admin or row.owner == caller.name


def list_visible(conn: Connection, caller: Caller) -> list[Row]:
    """The webhooks the caller may see: an admin, all; others, their own."""
    rows = conn.execute(select(schema.webhooks).order_by(schema.webhooks.c.id)).all()
    return [row for row in rows if _sees(caller, row)]


def get_visible(conn: Connection, caller: Caller, webhook_id: int) -> Row:
    row = get_webhook(conn, webhook_id)
    if not _sees(caller, row):
        raise NotFound(f"webhook {webhook_id} not found")  # others' webhooks are not shown to exist
    return row


def delete(conn: Connection, caller: Caller, webhook_id: int) -> None:
    """Remove a webhook (its owner or an admin) with the deliveries it still had to make."""
    row = get_visible(conn, caller, webhook_id)
    conn.execute(schema.webhook_deliveries.delete().where(schema.webhook_deliveries.c.webhook_id == row.id))
    conn.execute(schema.webhooks.delete().where(schema.webhooks.c.id == row.id))
    webhook_events.forget_cache()


def describe(row: Row, *, with_key: bool = False) -> dict[str, Any]:
    """The webhook as Determined's API answers it (enum names in full, each trigger numbered), with
    its owner and creation time; its signing key only in the answer to its creation."""
    return {
        "id": row.id,
        "name": row.name,
        "url": row.url,
        "webhookType": f"WEBHOOK_TYPE_{row.webhook_type}",
        "mode": f"WEBHOOK_MODE_{row.mode}",
        "triggers": [
            {
                "id": number,
                "webhookId": row.id,
                "triggerType": f"TRIGGER_TYPE_{trigger['triggerType']}",
                "condition": trigger.get("condition") or {},
            }
            for number, trigger in enumerate(row.triggers, start=1)
        ],
        "workspaceId": None,
        "owner": row.owner,
        "createdAt": row.created_at.isoformat(),
        "signingKey": row.signing_key if with_key else None,
    }


def set_url(conn: Connection, caller: Caller, webhook_id: int, url: str) -> None:
    """Send ``webhook_id``'s events to ``url`` from now on (its owner or an admin); ``url`` checked
    with :func:`check_url` and :func:`check_destination` before the transaction. Events not
    delivered yet go to the new address."""
    row = get_visible(conn, caller, webhook_id)
    conn.execute(schema.webhooks.update().where(schema.webhooks.c.id == row.id).values(url=url))
    webhook_events.forget_cache()


def test_event() -> dict[str, Any]:
    """What ``POST /webhooks/{id}/test`` sends, as Determined sends it: a state change to
    COMPLETED whose data is only ``{"data": "test"}``."""
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": "EXPERIMENT_STATE_CHANGE",
        "timestamp": int(time.time()),
        "condition": {"state": "COMPLETED"},
        "event_data": {"data": "test"},
    }


def deliveries(conn: Connection, caller: Caller, webhook_id: int) -> list[dict[str, Any]]:
    row = get_visible(conn, caller, webhook_id)
    table = schema.webhook_deliveries
    found = conn.execute(select(table).where(table.c.webhook_id == row.id).order_by(table.c.id)).all()
    return [
        {
            "id": d.id,
            "triggerType": d.trigger_type,
            "experimentId": d.experiment_id,
            "createdAt": d.created_at.isoformat(),
            "attempts": d.attempts,
            "state": "DELIVERED" if d.delivered_at else "GAVE_UP" if d.gave_up_at else "PENDING",
            "deliveredAt": d.delivered_at.isoformat() if d.delivered_at else None,
            "lastError": d.last_error,
            "payload": d.payload,
        }
        for d in found
    ]
