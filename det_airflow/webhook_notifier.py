"""The POST of one webhook event, as an Airflow notifier: the master's sender uses it for every
delivery, and a DAG may use it as a callback (``on_failure_callback=DetWebhookNotifier(...)``).

The body is signed as Determined signs it: ``X-Determined-AI-Signature`` is the hex HMAC-SHA256, under
the webhook's signing key, of the timestamp (``X-Determined-AI-Signature-Timestamp``), a comma, and
the body's bytes. A SLACK webhook gets Slack's message shape (``blocks`` of markdown text) in a plain
POST to its incoming-webhook address; Airflow's Slack provider is not required.

The address is checked as the master checks it (``webhook_address``: public addresses only, unless
``[det] webhook_allowed_hosts`` allows the host) and the POST goes to the address checked. What went
wrong is said in words that tell nobody which ports or hosts answer: no answer is no answer, whether
the connection was refused, reset or timed out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseNotifier

from det_airflow import pinned_http, webhook_address
from det_airflow.errors import DetError
from det_airflow.settings import SettingsError

SIGNATURE_HEADER = "X-Determined-AI-Signature"
TIMESTAMP_HEADER = "X-Determined-AI-Signature-Timestamp"


# What a failed delivery says (``lastError``), the same for every way of getting no answer.
NOT_ALLOWED = (
    "not sent: the address does not resolve to public addresses only, and airflow.cfg [det] "
    "webhook_allowed_hosts does not list it"
)
NO_ANSWER = (
    "no answer: the receiver could not be reached, its TLS certificate is not valid for its name, "
    "or it did not answer in time"
)


class DeliveryFailed(DetError):
    """The receiver could not be reached or did not answer 2xx; the message is safe to show."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause  # what happened, for the server's log only


def sign(signing_key: str, timestamp: int, body: bytes) -> str:
    """The signature of ``body`` sent at ``timestamp`` (what a receiver computes to check it)."""
    return hmac.new(signing_key.encode(), f"{timestamp},".encode() + body, hashlib.sha256).hexdigest()


def slack_message(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event as a Slack message: a headline and the experiment's fields."""
    data = event.get("event_data") or {}
    experiment = data.get("experiment") or {}
    kind = str(event.get("event_type", "event"))
    headline = f"*{kind}*"
    if experiment:
        headline += (
            f": experiment {experiment.get('id')} ({experiment.get('name')}) is {experiment.get('state')}"
        )
    details = []
    if "metric" in data:
        m = data["metric"]
        details.append(f"{m['group']} {m['name']} = {m['value']} at {m['steps_completed']} batches")
    if "log" in data:
        details.append(f"log: `{data['log']}`")
    if "data" in data:
        alert = data["data"]
        details.append(f"[{alert.get('level')}] {alert.get('title')}: {alert.get('description')}")
    if "trial_id" in data:
        details.append(f"trial {data['trial_id']}")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": headline}}]
    if details:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(details)}})
    return {"text": headline, "blocks": blocks}


class DetWebhookNotifier(BaseNotifier):
    """POST one signed event to a webhook's address; raises :class:`DeliveryFailed` unless it got 2xx.

    Args:
        url: the receiver's address.
        signing_key: the webhook's key, shown when it was created.
        event: the event to send; without it, a DAG callback's run is sent
            (``event_type`` ``DAG_RUN``, its dag_id, run_id and state).
        webhook_type: ``DEFAULT`` (the event as JSON) or ``SLACK`` (Slack's message shape).
        timeout: seconds for the whole request (connection, TLS, sending and the answer's status).
        allowed: hosts and networks that may be reached although not public; by default
            airflow.cfg ``[det] webhook_allowed_hosts``.
    """

    template_fields = ("url",)

    def __init__(
        self,
        *,
        url: str,
        signing_key: str,
        event: Mapping[str, Any] | None = None,
        webhook_type: str = "DEFAULT",
        timeout: float = 10.0,
        allowed: webhook_address.AllowList | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.signing_key = signing_key
        self.event = dict(event) if event is not None else None
        self.webhook_type = webhook_type.upper()
        self.timeout = timeout
        self.allowed = allowed

    def notify(self, context: Any) -> None:
        event = self.event if self.event is not None else _run_event(context)
        body = json.dumps(slack_message(event) if self.webhook_type == "SLACK" else event).encode()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json; charset=UTF-8",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(self.signing_key, timestamp, body),
        }
        try:
            allowed = self.allowed if self.allowed is not None else webhook_address.admin_allowed()
        except SettingsError as exc:  # the admin's setting names itself; nothing was sent
            raise DeliveryFailed(f"not sent: {exc}") from None
        try:
            target = webhook_address.resolve(self.url, allowed)
        except webhook_address.AddressRefused as exc:
            raise DeliveryFailed(NOT_ALLOWED, str(exc)) from None
        try:
            status = pinned_http.post(target, body, headers.items(), timeout=self.timeout)
        except pinned_http.TRANSPORT_ERRORS as exc:
            raise DeliveryFailed(NO_ANSWER, f"{type(exc).__name__}: {exc}") from None
        if not 200 <= status < 300:
            raise DeliveryFailed(f"the receiver answered HTTP {status}")


def _run_event(context: Any) -> dict[str, Any]:
    run = context.get("dag_run") if isinstance(context, Mapping) else None
    return {
        "event_type": "DAG_RUN",
        "timestamp": int(time.time()),
        "event_data": {
            "dag_id": getattr(run, "dag_id", None),
            "run_id": getattr(run, "run_id", None),
            "state": str(getattr(run, "state", "")) or None,
        },
    }
