"""The Compare page in a real browser against a real Airflow: a person selects two experiments that
differ in their learning rate on the Experiments page and compares them: one chart with every trial's
curve, the config setting that differs marked, one table of every trial; the URL alone brings the
same view back, and trials chosen on an experiment's Trials tab compare the same way."""

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

# A curve whose level is the learning rate: the smaller the rate, the smaller the loss.
TRAIN = """\
import det_airflow as det

lr = float(det.get_cluster_info().trial.hparams["lr"])
with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        batches = 0
        while batches < op.length:
            batches += 10
            loss = lr * 10 / batches
            core_context.train.report_validation_metrics(batches, {"validation_loss": loss})
            op.report_progress(batches)
        op.report_completed(loss)
"""


def ui(af: LocalAirflow, route: str) -> str:
    return f"{af.url}/det/ui/#/{route}"


def _run(det: DetEnv, context: Path, name: str, lr: Any, searcher: str) -> dict[str, Any]:
    config = {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": lr},
        "searcher": {"name": searcher, "metric": "validation_loss", "max_length": {"batches": 30}},
        "max_restarts": 0,
    }
    path = context / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return {"id": det.create(path, context), "lr": lr}


@pytest.fixture(scope="module")
def compared(det: DetEnv, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Two finished experiments: one trial at lr 0.1, and a grid of two trials at lr 0.2 and 0.4."""
    context = tmp_path_factory.mktemp("compare")
    (context / "train.py").write_text(TRAIN)
    made = [
        _run(det, context, "ui-compare-a", 0.1, "single"),
        _run(det, context, "ui-compare-b", {"type": "categorical", "vals": [0.2, 0.4]}, "grid"),
    ]
    answers = [det.wait_experiment(m["id"], timeout=600) for m in made]
    for answer in answers:
        assert answer["experiment"]["state"] == "COMPLETED", answer
    assert [len(a["trials"]) for a in answers] == [1, 2]
    return answers


def _row(page: Page, experiment_id: int) -> Any:
    return page.locator(f"[data-testid=experiment-row][data-id='{experiment_id}']")


def _expect_the_comparison(page: Page, trials: int) -> None:
    expect(page.get_by_test_id("compare-curves")).to_have_attribute("data-series", str(trials))
    expect(page.get_by_test_id("compare-curves").locator("canvas")).to_have_count(1)
    expect(page.get_by_test_id("compare-trial-row")).to_have_count(trials)
    lr_rows = page.locator("[data-testid=config-row][data-path^='hyperparameters.lr']")
    expect(lr_rows.first).to_have_attribute("data-differs", "true")
    expect(lr_rows.first).to_have_class(re.compile(r"\bdiffers\b"))
    same = page.locator("[data-testid=config-row][data-path='searcher.metric']")
    expect(same).to_have_attribute("data-differs", "false")


def test_compare_two_experiments_from_the_experiments_page(
    page: Page, airflow: LocalAirflow, compared: list[dict[str, Any]]
) -> None:
    a, b = (answer["experiment"]["id"] for answer in compared)
    page.goto(ui(airflow, "experiments"))
    compare = page.get_by_test_id("bulk-compare")
    _row(page, a).get_by_test_id("select-row").check()
    expect(compare).to_be_disabled()
    _row(page, b).get_by_test_id("select-row").check()
    compare.click()

    expect(page).to_have_url(re.compile(rf"#/compare\?experiments={a},{b}$"))
    _expect_the_comparison(page, trials=3)
    expect(page.get_by_test_id("compare-legend")).to_have_count(2)
    screenshot(page, "compare")

    # Sorted by the best metric, the smallest learning rate comes first.
    page.locator("[data-testid=compare-trials-table] th[data-column=best]").click()
    first = page.get_by_test_id("compare-trial-row").first
    expect(first).to_have_attribute("data-id", str(compared[0]["trials"][0]["id"]))
    expect(first).to_contain_text("validation_loss")

    page.get_by_test_id("only-differences").check()
    rows = page.get_by_test_id("config-row")
    expect(rows.first).to_be_visible()
    expect(page.locator("[data-testid=config-row][data-differs=false]")).to_have_count(0)

    page.get_by_test_id("toggle-hparams").click()
    expect(page.get_by_test_id("compare-hparams")).to_have_count(2)

    # The URL is the whole selection: reloaded, the page shows the same comparison.
    page.reload()
    _expect_the_comparison(page, trials=3)


def test_compare_trials_chosen_on_the_trials_tab(
    page: Page, airflow: LocalAirflow, compared: list[dict[str, Any]]
) -> None:
    b = compared[1]
    page.goto(ui(airflow, f"experiments/{b['experiment']['id']}"))
    button = page.get_by_test_id("compare-trials")
    boxes = page.get_by_test_id("trials-table").get_by_test_id("select-trial")
    boxes.nth(0).check()
    expect(button).to_be_disabled()
    boxes.nth(1).check()
    button.click()

    ids = ",".join(str(t["id"]) for t in sorted(b["trials"], key=lambda t: t["id"]))
    expect(page).to_have_url(re.compile(rf"#/compare\?trials={ids}$"))
    expect(page.get_by_test_id("compare-curves")).to_have_attribute("data-series", "2")
    expect(page.get_by_test_id("compare-trial-row")).to_have_count(2)


def test_trials_chosen_on_two_experiments_tabs_are_compared_together(
    page: Page, airflow: LocalAirflow, compared: list[dict[str, Any]]
) -> None:
    a, b = compared
    page.goto(ui(airflow, f"experiments/{a['experiment']['id']}"))
    page.get_by_test_id("trials-table").get_by_test_id("select-trial").nth(0).check()
    expect(page.get_by_test_id("compare-trials")).to_have_text("Compare trials (1)")

    # On another experiment's Trials tab the choice is still there, and says where it was made.
    page.goto(ui(airflow, f"experiments/{b['experiment']['id']}"))
    expect(page.get_by_test_id("chosen-elsewhere")).to_have_text("1 chosen on other experiments")
    page.get_by_test_id("trials-table").get_by_test_id("select-trial").nth(0).check()
    page.get_by_test_id("compare-trials").click()

    first_a = min(t["id"] for t in a["trials"])
    first_b = min(t["id"] for t in b["trials"])
    expect(page).to_have_url(
        re.compile(rf"#/compare\?trials={min(first_a, first_b)},{max(first_a, first_b)}$")
    )
    expect(page.get_by_test_id("compare-curves")).to_have_attribute("data-series", "2")
    expect(page.get_by_test_id("compare-trial-row")).to_have_count(2)

    page.goto(ui(airflow, f"experiments/{b['experiment']['id']}"))
    page.get_by_test_id("clear-chosen-trials").click()
    expect(page.get_by_test_id("compare-trials")).to_have_text("Compare trials")
    expect(page.get_by_test_id("chosen-elsewhere")).to_have_count(0)


def test_a_link_with_one_experiment_says_what_is_wrong(page: Page, airflow: LocalAirflow) -> None:
    page.goto(ui(airflow, "compare?experiments=1"))
    expect(page.get_by_test_id("error")).to_have_text(
        "Choose 2 to 10 experiments to compare (the link names 1)."
    )
