"""Webhooks on a real Airflow: the master sends each state an experiment takes to the webhook that
asks for it, keeps trying while the receiver is down and delivers every event once it is back; a
receiver that never comes back holds up nothing, and the experiment completes as it would without."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from det_airflow.states import ExperimentState
from tests.integration.conftest import free_port
from tests.integration.det_env import DetEnv, wait_until
from tests.integration.webhook_receiver import Receiver

pytestmark = pytest.mark.integration

TRAIN = """\
import det_airflow as det

with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        core_context.train.report_validation_metrics(op.length, {"validation_loss": 0.5})
        op.report_progress(op.length)
        op.report_completed(0.5)
"""
#: Every state an experiment can take after its creation.
STATES = [s.value for s in ExperimentState if s is not ExperimentState.DELETED]
DOWN_SECONDS = 30


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def create_webhook(det: DetEnv, name: str, url: str) -> tuple[int, str]:
    """A SPECIFIC webhook on every state, made with `det webhook create`: its ID and signing key."""
    triggers = [arg for state in STATES for arg in ("--trigger", f"state={state}")]
    out = det.det("webhook", "create", name, url, "--mode", "specific", *triggers).stdout
    created = re.search(r"Created webhook (\d+)", out)
    key = re.search(r"Signing key \(shown only now\): (\S+)", out)
    assert created and key, out
    return int(created.group(1)), key.group(1)


def run_experiment(det: DetEnv, context: Path, webhook: str) -> dict[str, Any]:
    """A one-trial experiment whose config names ``webhook``, run to its end."""
    (context / "train.py").write_text(TRAIN)
    config = {
        "name": f"hooked-{webhook}",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 5}},
        "max_restarts": 0,
        "integrations": {"webhooks": {"webhook_name": [webhook]}},
    }
    (context / "hooked.yaml").write_text(yaml.safe_dump(config))
    return det.wait_experiment(det.create(context / "hooked.yaml", context), timeout=600)


def deliveries(det: DetEnv, webhook_id: int) -> list[dict[str, Any]]:
    return list(det.get(f"/webhooks/{webhook_id}/deliveries")["deliveries"])


def test_a_receiver_down_when_the_experiment_ends_gets_every_state_once_when_it_comes_up(
    det: DetEnv, tmp_path: Path
) -> None:
    receiver = Receiver(free_port())
    webhook_id, key = create_webhook(det, "comes-back", receiver.url)
    answer = run_experiment(det, tmp_path, "comes-back")
    experiment_id = answer["experiment"]["id"]
    assert answer["experiment"]["state"] == "COMPLETED", answer
    changes = det.get(f"/experiments/{experiment_id}/state-changes")["state_changes"]
    taken = [c["to"] for c in changes if c["from"] is not None]
    assert taken[-1] == "COMPLETED", changes

    time.sleep(DOWN_SECONDS)
    waiting = deliveries(det, webhook_id)
    assert [d["state"] for d in waiting] == ["PENDING"] * len(taken), waiting
    assert all(d["attempts"] >= 1 and d["lastError"] for d in waiting), waiting

    receiver.start()
    try:
        wait_until(
            lambda: all(d["state"] == "DELIVERED" for d in deliveries(det, webhook_id)),
            "every event delivered once the receiver is up",
            timeout=120,
        )
        # Anything sent twice would arrive within the next tries' backoff.
        time.sleep(5)
    finally:
        receiver.stop()
    events = [post.event for post in receiver.posts]
    # Each event is sent when its own next try comes, so they may arrive in any order.
    assert sorted(e["event_data"]["experiment"]["state"] for e in events) == sorted(taken), events
    assert {e["event_data"]["experiment"]["id"] for e in events} == {experiment_id}
    assert len({e["event_id"] for e in events}) == len(events)
    assert all(post.signed_with(key) for post in receiver.posts)


def test_an_experiment_whose_receiver_never_comes_up_completes_and_its_events_wait(
    det: DetEnv, tmp_path: Path
) -> None:
    receiver = Receiver(free_port())
    webhook_id, _ = create_webhook(det, "never-up", receiver.url)
    answer = run_experiment(det, tmp_path, "never-up")
    assert answer["experiment"]["state"] == "COMPLETED", answer
    assert det.wait_dag_run(answer["experiment"]) == "success"
    (trial,) = answer["trials"]
    assert trial["state"] == "COMPLETED", trial

    def each_tried() -> list[dict[str, Any]]:
        found = deliveries(det, webhook_id)
        return found if found and all(d["attempts"] >= 1 for d in found) else []

    waiting = wait_until(each_tried, "a failed try of every event", timeout=60)
    assert {d["state"] for d in waiting} == {"PENDING"}, waiting
    assert waiting[-1]["payload"]["event_data"]["experiment"]["state"] == "COMPLETED"
    assert all(d["lastError"] for d in waiting), waiting
