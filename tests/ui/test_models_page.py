"""The model registry in the det web UI, in a real browser against a real Airflow: a person registers
a trial's checkpoint as the first version of a new model from the trial's page, follows the link to
the model, finds it on the Models page with one version, edits its description and notes, and
archives it. Screenshots go to test-results/ui/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Page, expect

from det_airflow.localairflow import LocalAirflow
from tests.integration.det_env import DetEnv
from tests.ui.conftest import screenshot

pytestmark = pytest.mark.integration

# One trial that validates and checkpoints once, at the end of its 10 batches.
CHECKPOINT_TRAIN = """\
import det_airflow as det

with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        core_context.train.report_validation_metrics(op.length, {"validation_loss": 0.25})
        with core_context.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "weights").write_text("ui model")
        op.report_progress(op.length)
        op.report_completed(0.25)
"""


def ui(af: LocalAirflow, route: str) -> str:
    return f"{af.url}/det/ui/#/{route}"


@pytest.fixture(scope="module")
def checkpointed(det: DetEnv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished single-trial experiment and its one COMPLETED checkpoint."""
    context: Path = tmp_path_factory.mktemp("checkpointed")
    (context / "train.py").write_text(CHECKPOINT_TRAIN)
    config = {
        "name": "ui-checkpointed",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 10}},
        "max_restarts": 0,
    }
    (context / "checkpointed.yaml").write_text(yaml.safe_dump(config))
    answer = det.wait_experiment(det.create(context / "checkpointed.yaml", context), timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer
    (checkpoint,) = det.get(f"/experiments/{answer['experiment']['id']}/checkpoints")["checkpoints"]
    assert checkpoint["state"] == "COMPLETED", checkpoint
    return {**answer, "checkpoint": checkpoint}


def test_register_a_trials_checkpoint_as_a_new_model_and_find_it_on_the_models_page(
    page: Page, airflow: LocalAirflow, det: DetEnv, checkpointed: dict[str, Any]
) -> None:
    checkpoint = checkpointed["checkpoint"]
    (trial,) = checkpointed["trials"]

    page.goto(ui(airflow, f"trials/{trial['id']}"))
    row = page.get_by_test_id("trial-checkpoints").locator(
        f"[data-testid=checkpoint-row][data-id='{checkpoint['uuid']}']"
    )
    row.get_by_role("button", name="Register").click()
    dialog = page.get_by_role("dialog", name="Register checkpoint")
    expect(dialog).to_contain_text(checkpoint["uuid"])
    # Escape closes it without registering anything.
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)

    row.get_by_role("button", name="Register").click()
    dialog.get_by_label("Model", exact=True).select_option(label="New model…")
    dialog.get_by_label("New model name").fill("ui/model")
    dialog.get_by_role("button", name="Register").click()
    # The master's own words for a bad name, and nothing made.
    expect(dialog.get_by_test_id("error")).to_contain_text("model name 'ui/model'")
    assert "ui/model" not in {m["name"] for m in det.get("/models")["models"]}

    dialog.get_by_label("New model name").fill("ui-model")
    dialog.get_by_role("button", name="Register").click()
    expect(dialog.get_by_test_id("register-done")).to_have_text("Registered as version 1 of ui-model.")
    screenshot(page, "register-checkpoint")
    model_id = det.get("/models/ui-model")["model"]["id"]
    dialog.get_by_role("link", name="ui-model").click()
    # A model's page is addressed by its id: names are each owner's own.
    expect(page).to_have_url(re.compile(rf"#/models/{model_id}$"))
    expect(page.get_by_test_id("model-name")).to_have_text("ui-model")

    page.get_by_test_id("nav-models").click()
    model_row = page.locator("[data-testid=model-row][data-id='ui-model']")
    expect(model_row.get_by_test_id("model-versions")).to_have_text("1")
    expect(model_row).to_contain_text(airflow.admin_user)
    screenshot(page, "models")

    model_row.get_by_role("link", name="ui-model").click()
    version = page.locator("[data-testid=version-row][data-id='1']")
    expect(version.get_by_test_id("version-number")).to_have_text("1")
    expect(version.get_by_test_id("version-checkpoint")).to_have_text(checkpoint["uuid"])
    expect(version.get_by_test_id("version-metrics")).to_have_text("validation_loss: 0.2500")
    expect(version.locator(f"a[href='#/trials/{trial['id']}']")).to_have_count(1)
    expect(version.locator(f"a[href='#/experiments/{checkpoint['experiment_id']}']")).to_have_count(1)

    # Description and notes are saved on the master.
    page.get_by_label("Description", exact=True).fill("the browser's model")
    page.get_by_label("Notes").fill("registered from the trial page")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("button", name="Save")).to_be_disabled()
    model = det.get("/models/ui-model")["model"]
    assert (model["description"], model["notes"]) == ("the browser's model", "registered from the trial page")

    page.get_by_role("button", name="Archive").click()
    expect(page.get_by_role("button", name="Unarchive")).to_be_visible()
    assert det.get("/models/ui-model")["model"]["archived"] is True
    screenshot(page, "model-ui-model")
