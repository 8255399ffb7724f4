"""``core_context.alert`` on a trial reaches the master over HTTP with the trial token, which
records one CUSTOM webhook event for it; the master is the real app on SQLite behind a socket."""

from __future__ import annotations

import pytest

from det_airflow.api.runtime import RuntimeClient
from det_airflow.core import DistributedContext
from det_airflow.core._context import Context
from det_airflow.core._remote import RemoteBackend
from det_airflow.master import schema, webhook_events
from tests.unit.master.creating import Creator, creator  # noqa: F401
from tests.unit.master.people_app import people  # noqa: F401
from tests.unit.operators.test_kubernetes_context import TOKEN, MasterOverHttp, add_trial


def test_an_alert_becomes_an_event_of_the_custom_webhooks(
    creator: Creator,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")  # the admin allows loopback
    people_app = creator.people
    made = people_app.call(
        "admin",
        "POST",
        "/webhooks",
        json={"name": "alerts", "url": "http://127.0.0.1:9/", "triggers": [{"triggerType": "CUSTOM"}]},
    )
    assert made.status_code == 200, made.text
    webhook_events.forget_cache()
    experiment_id = creator.create(paused=True).json()["experiment"]["id"]
    trial_id = add_trial(people_app, experiment_id)
    with MasterOverHttp(people_app) as server:
        backend = RemoteBackend(RuntimeClient(server.url, TOKEN, trial_id))
        context = Context.__new__(Context)
        context.distributed, context._backend = DistributedContext(), backend
        context.alert(title="diverged", description="loss is nan", level="error")
    with people_app.db.read() as conn:
        (payload,) = conn.execute(schema.webhook_deliveries.select()).mappings().all()
    assert payload["trigger_type"] == "CUSTOM"
    assert payload["payload"]["event_data"]["data"] == {
        "title": "diverged",
        "description": "loss is nan",
        "level": "error",
    }
