"""Webhooks through the master's routes: who may set and see them, what input is refused, and
events POSTed, signed, once each, to a real receiver on loopback, one that is down for a while
and one that never answers, without any of it touching the experiment."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from det_airflow.master import housekeeping, schema, webhook_events, webhook_log_matcher, webhook_sender
from det_airflow.master.auth import hash_token
from det_airflow.master.lifecycle import now
from det_airflow.webhook_notifier import SIGNATURE_HEADER, TIMESTAMP_HEADER
from tests.unit.master.people_app import People

PAUSED = [{"triggerType": "EXPERIMENT_STATE_CHANGE", "condition": {"state": "PAUSED"}}]


class Receiver:
    """An HTTP server on loopback that keeps every POST it gets."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                receiver.answer(self, self.rfile.read(int(self.headers["Content-Length"])))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @classmethod
    def on(cls, host: str, port: int = 0, tls: ssl.SSLContext | None = None) -> Receiver:
        return cls(port, host, tls)

    def answer(self, handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        self.posts.append((dict(handler.headers.items()), body))
        handler.send_response(200)
        handler.end_headers()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The receivers here listen on loopback, which webhooks reach only when an admin allows it."""
    monkeypatch.setenv("AIRFLOW__DET__WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    webhook_events.forget_cache()
    yield
    webhook_events.forget_cache()


def create(people: People, user: str, **body: Any) -> Any:
    body = {"name": "hook", "url": "http://127.0.0.1:9/x", "triggers": PAUSED, **body}
    return people.call(user, "POST", "/webhooks", json=body)


def verified(post: tuple[dict[str, str], bytes], key: str) -> dict[str, Any]:
    headers, body = post
    timestamp = headers[TIMESTAMP_HEADER]
    expected = hmac.new(key.encode(), f"{timestamp},".encode() + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers[SIGNATURE_HEADER], expected)
    return dict(json.loads(body))


def test_admins_create_any_webhook_others_only_specific_ones(people: People) -> None:
    made = create(people, "admin", mode="WORKSPACE")
    assert made.status_code == 200, made.text
    assert len(made.json()["webhook"]["signingKey"]) == 64
    refused = create(people, "alice", name="mine", mode="WORKSPACE")
    assert refused.status_code == 403
    assert "only admins may" in refused.json()["detail"]
    assert create(people, "viewer", name="v", mode="SPECIFIC").status_code == 403
    assert create(people, "alice", name="mine", mode="SPECIFIC").status_code == 200

    listed = people.call("alice", "GET", "/webhooks").json()["webhooks"]
    assert [w["name"] for w in listed] == ["mine"]
    assert all(w["signingKey"] is None for w in listed)
    assert [w["name"] for w in people.call("admin", "GET", "/webhooks").json()["webhooks"]] == [
        "hook",
        "mine",
    ]
    assert people.call("bob", "GET", "/webhooks").json()["webhooks"] == []


def test_only_the_owner_or_an_admin_deletes_a_webhook(people: People) -> None:
    hook_id = create(people, "alice", mode="SPECIFIC").json()["webhook"]["id"]
    assert people.call("bob", "DELETE", f"/webhooks/{hook_id}").status_code == 404
    assert people.call("bob", "GET", f"/webhooks/{hook_id}/deliveries").status_code == 404
    assert people.call("admin", "DELETE", f"/webhooks/{hook_id}").status_code == 200
    gone = people.call("alice", "DELETE", f"/webhooks/{hook_id}")
    assert gone.status_code == 404
    assert gone.json()["detail"] == f"webhook {hook_id} not found"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"url": "ftp://host/x"}, "an http:// or https:// address"),
        ({"name": "has space"}, "webhook name 'has space'"),
        ({"triggers": []}, "at least one trigger"),
        (
            {"triggers": [{"triggerType": "EXPERIMENT_STATE_CHANGE", "condition": {"state": "DONE"}}]},
            "condition.state 'DONE' is not an experiment state",
        ),
        (
            {"triggers": [{"triggerType": "METRIC_THRESHOLD_EXCEEDED", "condition": {"metricName": "loss"}}]},
            "condition.compareOp None",
        ),
        ({"triggers": [{"triggerType": "TASK_LOG", "condition": {"regex": "("}}]}, "does not compile"),
    ],
)
def test_bad_webhooks_are_refused_with_what_is_wrong(people: People, body: dict, message: str) -> None:
    answer = create(people, "admin", **body)
    assert answer.status_code == 400
    assert message in answer.json()["detail"]


def test_a_name_is_taken_once(people: People) -> None:
    assert create(people, "admin").status_code == 200
    again = create(people, "admin")
    assert again.status_code == 400
    assert again.json()["detail"] == "webhook 'hook' already exists"


def test_each_state_change_is_posted_once_and_signed(people: People, receiver: Receiver) -> None:
    key = create(people, "admin", url=receiver.url).json()["webhook"]["signingKey"]
    experiment_id = people.add_experiment(owner="alice")
    assert people.call("alice", "POST", f"/experiments/{experiment_id}/pause").status_code == 200
    assert people.call("alice", "POST", f"/experiments/{experiment_id}/activate").status_code == 200
    assert receiver.posts == []  # the request recorded the event; the sender posts it
    assert webhook_sender.deliver_due(people.db) == 1
    assert webhook_sender.deliver_due(people.db) == 0
    (post,) = receiver.posts
    event = verified(post, key)
    assert event["event_type"] == "EXPERIMENT_STATE_CHANGE"
    assert event["event_data"]["experiment"]["id"] == experiment_id
    assert event["event_data"]["experiment"]["state"] == "PAUSED"


def test_determineds_sdk_body_with_its_enum_names_makes_the_same_webhook(
    people: People, receiver: Receiver
) -> None:
    """What Determined's SDK sends to ``POST /api/v1/webhooks`` (bindings.v1Webhook.to_json()):
    protobuf enum names, and nulls for what the master numbers."""
    sdk_body = {
        "mode": "WEBHOOK_MODE_WORKSPACE",
        "name": "sdk-hook",
        "url": receiver.url,
        "webhookType": "WEBHOOK_TYPE_DEFAULT",
        "id": None,
        "triggers": [
            {
                "condition": {"state": "PAUSED"},
                "id": None,
                "triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                "webhookId": None,
            }
        ],
        "workspaceId": None,
    }
    made = people.call("admin", "POST", "/webhooks", json=sdk_body)
    assert made.status_code == 200, made.text
    hook = made.json()["webhook"]
    # The answer is Determined's Webhook message: enum names in full, triggers numbered.
    assert {k: hook[k] for k in ("webhookType", "mode", "workspaceId", "name", "url")} == {
        "webhookType": "WEBHOOK_TYPE_DEFAULT",
        "mode": "WEBHOOK_MODE_WORKSPACE",
        "workspaceId": None,
        "name": "sdk-hook",
        "url": receiver.url,
    }
    assert hook["triggers"] == [
        {
            "id": 1,
            "webhookId": hook["id"],
            "triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
            "condition": {"state": "PAUSED"},
        }
    ]
    listed = people.call("admin", "GET", "/webhooks").json()["webhooks"]
    assert [w["triggers"] for w in listed] == [hook["triggers"]]
    experiment_id = people.add_experiment(owner="alice")
    assert people.call("alice", "POST", f"/experiments/{experiment_id}/pause").status_code == 200
    assert webhook_sender.deliver_due(people.db) == 1
    event = verified(receiver.posts[0], hook["signingKey"])
    assert (event["event_type"], event["condition"]) == ("EXPERIMENT_STATE_CHANGE", {"state": "PAUSED"})
    assert set(event) == {"event_id", "event_type", "timestamp", "condition", "event_data"}

    slack = people.call(
        "admin", "POST", "/webhooks", json={**sdk_body, "name": "s", "webhookType": "WEBHOOK_TYPE_SLACK"}
    )
    assert slack.json()["webhook"]["webhookType"] == "WEBHOOK_TYPE_SLACK"
    # A webhook of one workspace is Determined's, not det's: refused, saying what to do instead.
    scoped = people.call("admin", "POST", "/webhooks", json={**sdk_body, "name": "w", "workspaceId": 1})
    assert scoped.status_code == 422
    assert "webhooks of one workspace are not supported: leave workspaceId out" in scoped.text


def test_determineds_patch_moves_a_webhook_to_another_address_checked_as_a_new_one(
    people: People, receiver: Receiver
) -> None:
    hook = create(people, "alice", mode="SPECIFIC", url="http://127.0.0.1:9/old").json()["webhook"]
    path = f"/webhooks/{hook['id']}"
    assert people.call("bob", "PATCH", path, json={"url": receiver.url}).status_code == 404
    refused = people.call("alice", "PATCH", path, json={"url": "http://10.1.2.3/x"})
    assert refused.status_code == 400
    assert "10.1.2.3" in refused.json()["detail"]
    assert people.call("alice", "PATCH", path, json={"url": "ftp://h/x"}).status_code == 400
    assert [w["url"] for w in people.call("alice", "GET", "/webhooks").json()["webhooks"]] == [
        "http://127.0.0.1:9/old"
    ]

    assert people.call("alice", "PATCH", path, json={"url": receiver.url}).json() == {}
    assert [w["url"] for w in people.call("alice", "GET", "/webhooks").json()["webhooks"]] == [receiver.url]


def test_determineds_test_event_is_sent_signed_and_its_refusal_is_told(
    people: People, receiver: Receiver
) -> None:
    hook = create(people, "alice", mode="SPECIFIC", url=receiver.url).json()["webhook"]
    assert people.call("bob", "POST", f"/webhooks/{hook['id']}/test").status_code == 404
    assert people.call("alice", "POST", f"/webhooks/{hook['id']}/test").json() == {}
    event = verified(receiver.posts[0], hook["signingKey"])
    assert (event["event_type"], event["condition"], event["event_data"]) == (
        "EXPERIMENT_STATE_CHANGE",
        {"state": "COMPLETED"},
        {"data": "test"},
    )
    assert people.call("alice", "GET", f"/webhooks/{hook['id']}/deliveries").json()["deliveries"] == []

    down = create(people, "alice", name="down", mode="SPECIFIC", url=f"http://127.0.0.1:{free_port()}/x")
    failed = people.call("alice", "POST", f"/webhooks/{down.json()['webhook']['id']}/test")
    assert failed.status_code == 400
    assert "test event was not taken: no answer" in failed.json()["detail"]


def test_housekeeping_sends_on_a_thread_of_its_own(people: People, receiver: Receiver) -> None:
    create(people, "admin", url=receiver.url)
    experiment_id = people.add_experiment(owner="alice")
    people.call("alice", "POST", f"/experiments/{experiment_id}/pause")
    assert housekeeping.run_job(housekeeping.DELIVER_WEBHOOKS, people.db)
    deadline = time.monotonic() + 10
    while not receiver.posts and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.posts) == 1


def test_a_receiver_down_for_a_while_gets_every_event(people: People) -> None:
    port = free_port()
    key = create(people, "admin", url=f"http://127.0.0.1:{port}/hook").json()["webhook"]["signingKey"]
    ids = [people.add_experiment(owner="alice") for _ in range(3)]
    for experiment_id in ids:
        assert people.call("alice", "POST", f"/experiments/{experiment_id}/pause").status_code == 200
    assert webhook_sender.deliver_due(people.db) == 0
    hook_id = people.call("admin", "GET", "/webhooks").json()["webhooks"][0]["id"]
    pending = people.call("admin", "GET", f"/webhooks/{hook_id}/deliveries").json()["deliveries"]
    assert [d["state"] for d in pending] == ["PENDING"] * 3
    assert all(d["lastError"] for d in pending)

    receiver = Receiver(port)
    try:
        assert webhook_sender.deliver_due(people.db) == 0  # not due again yet: backing off
        assert webhook_sender.deliver_due(people.db, at=now() + timedelta(seconds=30)) == 3
    finally:
        receiver.close()
    got = sorted(verified(p, key)["event_data"]["experiment"]["id"] for p in receiver.posts)
    assert got == ids
    done = people.call("admin", "GET", f"/webhooks/{hook_id}/deliveries").json()["deliveries"]
    assert [d["state"] for d in done] == ["DELIVERED"] * 3


def test_a_receiver_that_never_answers_leaves_the_experiment_alone(people: People) -> None:
    create(people, "admin", url=f"http://127.0.0.1:{free_port()}/hook")
    experiment_id = people.add_experiment(owner="alice")
    assert people.call("alice", "POST", f"/experiments/{experiment_id}/pause").status_code == 200
    for hours in (0, 1, 6, 25):
        webhook_sender.deliver_due(people.db, at=now() + timedelta(hours=hours))
    assert people.experiment(experiment_id).state == "PAUSED"
    assert people.call("alice", "POST", f"/experiments/{experiment_id}/activate").status_code == 200
    hook_id = people.call("admin", "GET", "/webhooks").json()["webhooks"][0]["id"]
    (delivery,) = people.call("admin", "GET", f"/webhooks/{hook_id}/deliveries").json()["deliveries"]
    assert delivery["state"] == "GAVE_UP"
    assert delivery["attempts"] == 4


def test_a_specific_webhook_fires_for_its_owners_experiments_that_name_it(
    people: People, receiver: Receiver
) -> None:
    create(people, "alice", name="mine", mode="SPECIFIC", url=receiver.url)
    named = people.add_experiment(owner="alice")
    unnamed = people.add_experiment(owner="alice")
    bobs = people.add_experiment(owner="bob")
    for experiment_id in (named, bobs):
        with people.db.begin() as conn:
            config = dict(people.experiment(experiment_id).config)
            config["integrations"] = {"webhooks": {"webhook_name": ["mine"]}}
            conn.execute(
                schema.experiments.update()
                .where(schema.experiments.c.id == experiment_id)
                .values(config=config)
            )
    for experiment_id, owner in ((named, "alice"), (unnamed, "alice"), (bobs, "bob")):
        assert people.call(owner, "POST", f"/experiments/{experiment_id}/pause").status_code == 200
    assert webhook_sender.deliver_due(people.db) == 1
    (post,) = receiver.posts
    assert json.loads(post[1])["event_data"]["experiment"]["id"] == named


def test_slack_webhooks_get_slacks_message_shape(people: People, receiver: Receiver) -> None:
    create(people, "admin", url=receiver.url, webhookType="SLACK")
    experiment_id = people.add_experiment(owner="alice")
    people.call("alice", "POST", f"/experiments/{experiment_id}/pause")
    webhook_sender.deliver_due(people.db)
    message = json.loads(receiver.posts[0][1])
    assert message["blocks"][0]["type"] == "section"
    assert f"experiment {experiment_id} (mnist) is PAUSED" in message["text"]


TOKEN = "trial-token"


def running_trial(people: People) -> int:
    experiment_id = people.add_experiment(owner="alice")
    with people.db.begin() as conn:
        result = conn.execute(
            schema.trials.insert().values(
                experiment_id=experiment_id,
                request_id=1,
                state="RUNNING",
                hparams={},
                trial_seed=1,
                summary={},
                run_id=1,
                token_hash=hash_token(TOKEN),
            )
        )
    return int(result.inserted_primary_key[0])


def from_trial(people: People, trial_id: int, what: str, body: dict[str, Any]) -> Any:
    path = f"/runtime/trials/{trial_id}/{what}"
    return people.call(None, "POST", path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})


def test_a_metric_past_its_threshold_is_posted_once_per_trial(people: People, receiver: Receiver) -> None:
    condition = {"metricName": "loss", "metricGroup": "validation", "compareOp": ">", "value": 0.5}
    create(
        people,
        "admin",
        url=receiver.url,
        triggers=[{"triggerType": "METRIC_THRESHOLD_EXCEEDED", "condition": condition}],
    )
    trial_id = running_trial(people)
    for steps, loss in ((10, 0.4), (20, 0.9), (30, 1.2)):
        report = {"group": "validation", "steps_completed": steps, "metrics": {"loss": loss}}
        assert from_trial(people, trial_id, "metrics", {"reports": [report]}).status_code == 200
    assert webhook_sender.deliver_due(people.db) == 1
    metric = json.loads(receiver.posts[0][1])["event_data"]["metric"]
    assert metric == {"name": "loss", "group": "validation", "value": 0.9, "steps_completed": 20}


def test_a_log_line_matching_a_regex_is_posted_once_per_trial(
    people: People, receiver: Receiver, service_headers: dict[str, str]
) -> None:
    regex = [{"triggerType": "TASK_LOG", "condition": {"regex": r"CUDA out of memory"}}]
    create(people, "admin", url=receiver.url, triggers=regex)
    trial_id = running_trial(people)
    for batch in (["epoch 1", "RuntimeError: CUDA out of memory"], ["CUDA out of memory again"]):
        logs = {"logs": [{"message": m} for m in batch]}
        answer = people.client.post(
            f"/api/v1/internal/trials/{trial_id}/logs", json=logs, headers=service_headers
        )
        assert answer.status_code == 200, answer.text
        assert webhook_log_matcher.wait_matched(timeout=30)  # matched after the lines are stored
    assert webhook_sender.deliver_due(people.db) == 1
    assert json.loads(receiver.posts[0][1])["event_data"]["log"] == "RuntimeError: CUDA out of memory"


def test_an_alert_from_the_training_code_reaches_custom_webhooks(people: People, receiver: Receiver) -> None:
    create(people, "admin", url=receiver.url, triggers=[{"triggerType": "CUSTOM"}])
    trial_id = running_trial(people)
    alert = {"title": "diverged", "description": "loss is nan", "level": "error"}
    answer = from_trial(people, trial_id, "alert", alert)
    assert answer.status_code == 200
    assert answer.json() == {"webhooks": 1}
    assert webhook_sender.deliver_due(people.db) == 1
    assert json.loads(receiver.posts[0][1])["event_data"]["data"] == alert


def test_a_dag_callback_posts_its_run_signed(receiver: Receiver) -> None:
    from airflow.utils.state import DagRunState

    from det_airflow.operators.notifications import DetWebhookNotifier

    class Run:
        dag_id, run_id, state = "det_7", "manual__1", DagRunState.FAILED

    DetWebhookNotifier(url=receiver.url, signing_key="k")({"dag_run": Run()})
    event = verified(receiver.posts[0], "k")
    assert event["event_type"] == "DAG_RUN"
    assert event["event_data"] == {"dag_id": "det_7", "run_id": "manual__1", "state": "failed"}
