"""Routes for webhooks (`det webhook`): admins set any, others SPECIFIC ones for their own
experiments; each person sees and removes their own, admins all. The training code's alerts
(``core_context.alert``) arrive here too, with the trial's token."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import (
    Alert,
    AlertAnswer,
    CreateWebhook,
    Empty,
    PatchWebhook,
    WebhookAnswer,
    WebhookDeliveryList,
    WebhookList,
)
from det_airflow.master import webhook_events, webhooks
from det_airflow.master.auth import CrossSiteGuard, TrialAuth
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database
from det_airflow.master.webhook_sender import TIMEOUT_SECONDS
from det_airflow.webhook_notifier import DeliveryFailed, DetWebhookNotifier

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])
runtime_router = APIRouter(prefix="/runtime")


@router.post("/webhooks", response_model=WebhookAnswer)
def create_webhook(body: CreateWebhook, caller: CallerDep) -> dict:
    """Create a webhook; the answer is the only one that shows its signing key. It is checked,
    its URL's host resolved included, before the transaction that stores it."""
    new = webhooks.check_new(
        caller,
        name=body.name,
        url=body.url,
        webhook_type=body.webhookType,
        mode=body.mode,
        triggers=[t.model_dump() for t in body.triggers],
    )
    with get_database().begin() as conn:
        row = webhooks.create(conn, caller, new)
        return {"webhook": webhooks.describe(row, with_key=True)}


@router.get("/webhooks", response_model=WebhookList)
def list_webhooks(caller: CallerDep) -> dict:
    with get_database().read() as conn:
        return {"webhooks": [webhooks.describe(row) for row in webhooks.list_visible(conn, caller)]}


@router.delete("/webhooks/{webhook_id}", response_model=Empty)
def delete_webhook(webhook_id: int, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        webhooks.delete(conn, caller, webhook_id)
    return {}


@router.patch("/webhooks/{webhook_id}", response_model=Empty)
def patch_webhook(webhook_id: int, body: PatchWebhook, caller: CallerDep) -> dict:
    """Determined's ``PatchWebhook``: a new address, checked as a new webhook's is (its host
    resolved before the transaction); events not delivered yet go there."""
    with get_database().read() as conn:
        webhooks.get_visible(conn, caller, webhook_id)  # an unknown id is told before any lookup
    url = webhooks.check_url(body.url)
    webhooks.check_destination(url)
    with get_database().begin() as conn:
        webhooks.set_url(conn, caller, webhook_id, url)
    return {}


@router.post("/webhooks/{webhook_id}/test", response_model=Empty)
def test_webhook(webhook_id: int, caller: CallerDep) -> dict:
    """Determined's ``TestWebhook``: send a test event now, signed as every event is, and say
    whether the receiver took it (400 with the reason when not). Nothing is recorded."""
    with get_database().read() as conn:
        row = webhooks.get_visible(conn, caller, webhook_id)
    notifier = DetWebhookNotifier(
        url=row.url,
        signing_key=row.signing_key,
        event=webhooks.test_event(),
        webhook_type=row.webhook_type,
        timeout=TIMEOUT_SECONDS,
    )
    try:
        notifier.notify({})
    except DeliveryFailed as exc:
        raise webhooks.WebhookError(f"webhook {webhook_id}'s test event was not taken: {exc}") from None
    return {}


@router.get("/webhooks/{webhook_id}/deliveries", response_model=WebhookDeliveryList)
def webhook_deliveries(webhook_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        return {"deliveries": webhooks.deliveries(conn, caller, webhook_id)}


@runtime_router.post("/trials/{trial_id}/alert", response_model=AlertAnswer)
def alert(trial_id: TrialAuth, body: Alert) -> dict:
    with get_database().begin() as conn:
        count = webhook_events.alert_raised(
            conn, trial_id, title=body.title, description=body.description, level=body.level
        )
    return {"webhooks": count}
