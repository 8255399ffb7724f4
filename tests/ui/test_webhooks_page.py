"""The Webhooks page in a real browser against a real Airflow: a person creates a webhook on an
experiment's COMPLETED state pointing at a receiver on loopback, keeps its signing key (shown once),
runs an experiment that names it, and sees the one signed POST arrive and the page show it
delivered; then deletes the webhook. Screenshots go to test-results/ui/."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Page, expect

from det_airflow.localairflow import LocalAirflow
from tests.integration.conftest import free_port
from tests.integration.det_env import DetEnv, wait_until
from tests.integration.webhook_receiver import Receiver
from tests.ui.conftest import screenshot

pytestmark = pytest.mark.integration

TRAIN = """\
import det_airflow as det

with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        core_context.train.report_validation_metrics(op.length, {"validation_loss": 0.5})
        op.report_progress(op.length)
        op.report_completed(0.5)
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver(free_port()).start()
    yield started
    started.stop()


def test_create_a_webhook_see_its_key_once_and_its_delivery_of_a_completed_experiment(
    page: Page, airflow: LocalAirflow, det: DetEnv, receiver: Receiver, tmp_path: Path
) -> None:
    page.goto(f"{airflow.url}/det/ui/#/experiments")
    page.get_by_test_id("nav-webhooks").click()
    expect(page.get_by_role("heading", name="Webhooks", exact=True)).to_be_visible()
    form = page.get_by_test_id("new-webhook-form")

    # The master's own words for an address it cannot send to, and nothing made.
    form.get_by_label("Name").fill("ui-hook")
    form.get_by_label("URL").fill("ftp://127.0.0.1/hook")
    form.get_by_role("button", name="Create").click()
    expect(form.get_by_test_id("error")).to_contain_text("webhook url 'ftp://127.0.0.1/hook'")
    assert det.get("/webhooks")["webhooks"] == []

    # A second trigger row can be added and removed again.
    form.get_by_role("button", name="Add trigger").click()
    second = form.get_by_role("group", name="Trigger 2")
    second.get_by_label("Kind").select_option(label="Log line matches")
    expect(second.get_by_label("Regex")).to_be_visible()
    form.get_by_role("button", name="Remove trigger 2").click()
    expect(form.get_by_test_id("trigger-row")).to_have_count(1)

    form.get_by_label("URL").fill(receiver.url)
    first = form.get_by_role("group", name="Trigger 1")
    first.get_by_label("Kind").select_option(label="Experiment state")
    first.get_by_label("State").select_option("COMPLETED")
    form.get_by_role("button", name="Create").click()

    shown = page.get_by_role("region", name="Signing key")
    expect(shown).to_contain_text("Shown only now")
    key = shown.get_by_label("Key").input_value()
    assert re.fullmatch(r"[0-9a-f]{64}", key), key
    shown.get_by_role("button", name="Copy").click()
    expect(shown.get_by_role("status")).to_have_text(re.compile(r"Copied\.|Selected"))
    row = page.locator("[data-testid=webhook-row][data-id='ui-hook']")
    expect(row.get_by_test_id("webhook-triggers")).to_have_text("experiment reaches COMPLETED")
    expect(row).to_contain_text("SPECIFIC")
    expect(row).to_contain_text(receiver.url)
    screenshot(page, "webhook-created")

    # Once dismissed, the key is nowhere: not on the page after a reload, not in the master's list.
    shown.get_by_role("button", name="Done").click()
    expect(shown).to_have_count(0)
    page.reload()
    expect(row).to_be_visible()
    assert key not in page.content()
    (listed,) = det.get("/webhooks")["webhooks"]
    assert listed["signingKey"] is None

    (tmp_path / "train.py").write_text(TRAIN)
    config = {
        "name": "ui-hooked",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 5}},
        "max_restarts": 0,
        "integrations": {"webhooks": {"webhook_name": ["ui-hook"]}},
    }
    (tmp_path / "hooked.yaml").write_text(yaml.safe_dump(config))
    answer = det.wait_experiment(det.create(tmp_path / "hooked.yaml", tmp_path), timeout=600)
    experiment_id = answer["experiment"]["id"]
    assert answer["experiment"]["state"] == "COMPLETED", answer

    wait_until(lambda: receiver.posts, "the webhook's POST", timeout=60)
    # A second POST of the same event would come within a few seconds.
    time.sleep(5)
    (post,) = receiver.posts
    assert post.signed_with(key), post.headers
    event = post.event
    assert event["event_type"] == "EXPERIMENT_STATE_CHANGE"
    assert event["event_data"]["experiment"]["id"] == experiment_id
    assert event["event_data"]["experiment"]["state"] == "COMPLETED"

    row.get_by_role("button", name="Deliveries").click()
    delivered = page.get_by_test_id("webhook-deliveries").get_by_test_id("delivery-row")
    expect(delivered).to_have_count(1)
    expect(delivered.get_by_test_id("delivery-state")).to_have_text("DELIVERED")
    expect(delivered.get_by_test_id("delivery-attempts")).to_have_text("1")
    expect(delivered.get_by_test_id("delivery-event")).to_have_text("experiment reaches COMPLETED")
    expect(delivered.locator(f"a[href='#/experiments/{experiment_id}']")).to_have_count(1)
    screenshot(page, "webhook-deliveries")

    # Deleting asks first; Cancel keeps it.
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    expect(row).to_be_visible()
    row.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete webhook ui-hook?")
    dialog.get_by_role("button", name="OK").click()
    expect(row).to_have_count(0)
    assert det.get("/webhooks")["webhooks"] == []
