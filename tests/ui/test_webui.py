"""The det web UI in a real browser (Debian's chromium through Playwright) against a real Airflow
and PostgreSQL: signed in on Airflow's login page as the admin, a person finds the pages in
Airflow's navigation, reads the experiments list, counts the learning curves of an experiment,
filters a trial's logs by rank, level and text and follows a running trial's, continues a trial
as a new experiment, pauses and activates an experiment, and reorders the job queue.
Screenshots of every page go to test-results/ui/."""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import Locator, Page, expect

from det_airflow.localairflow import LocalAirflow
from tests.integration.det_env import REPO, DetEnv, wait_until
from tests.ui.conftest import screenshot

pytestmark = pytest.mark.integration

STATIC = REPO / "plugins" / "webui" / "static"
QUEUE_POOL = "det_ui_queue"

# Run under the torch_distributed launcher with two slots, so each trial has ranks 0 and 1: rank 1
# only says a few lines, rank 0 reports a learning curve whose level depends on the learning rate.
RANKED_TRAIN = """\
import logging
import os

import det_airflow as det

logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
rank = int(os.environ["RANK"])
if rank != 0:
    logging.info("worker %d ready", rank)
    logging.warning("worker %d has nothing to train", rank)
    raise SystemExit(0)
lr = float(det.get_cluster_info().trial.hparams["lr"])
with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        batches = 0
        while batches < op.length:
            batches += 10
            loss = lr * 10 / batches
            core_context.train.report_training_metrics(batches, {"loss": loss})
            core_context.train.report_validation_metrics(batches, {"validation_loss": loss})
            op.report_progress(batches)
        op.report_completed(loss)
logging.info("chief finished training")
"""

# Runs until the test creates its release file; a pause reaches it as should_preempt().
HOLD = """\
import os
import time

import det_airflow as det

release = os.environ["RELEASE_FILE"]
with det.core.init() as core_context:
    print("holding until released", flush=True)
    while not os.path.exists(release):
        if core_context.preempt.should_preempt():
            raise SystemExit(0)
        time.sleep(0.5)
    print("released", flush=True)
"""


@pytest.fixture(scope="module")
def curves(det: DetEnv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished random search of three two-rank trials, each with four validation points."""
    context = tmp_path_factory.mktemp("ranked")
    (context / "train.py").write_text(RANKED_TRAIN)
    config = {
        "name": "ui-curves",
        "labels": ["browser-test"],
        "entrypoint": "python3 -m det_airflow.launchers.torch_distributed python3 train.py",
        "hyperparameters": {
            "lr": {"type": "double", "minval": 0.1, "maxval": 1.0},
            "weight_decay": {"type": "log", "base": 10, "minval": -5, "maxval": -1},
            "dropout": 0.5,
            "global_batch_size": {"type": "const", "val": 32},
        },
        "searcher": {
            "name": "random",
            "metric": "validation_loss",
            "smaller_is_better": True,
            "max_trials": 3,
            "max_concurrent_trials": 3,
            "max_length": {"batches": 40},
        },
        "resources": {"slots_per_trial": 2},
        "max_restarts": 0,
    }
    (context / "curves.yaml").write_text(yaml.safe_dump(config))
    answer = det.wait_experiment(det.create(context / "curves.yaml", context), timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer
    assert len(answer["trials"]) == 3 and {t["state"] for t in answer["trials"]} == {"COMPLETED"}, answer
    return answer


def fanova_order(trials: list[dict[str, Any]]) -> list[str]:
    """The searched hyperparameters, most important first, as Optuna's fANOVA (seed 0) ranks them on
    the trials' best validation losses."""
    import optuna
    from optuna.distributions import FloatDistribution

    distributions = {
        "lr": FloatDistribution(0.1, 1.0),
        "weight_decay": FloatDistribution(1e-5, 1e-1, log=True),
    }
    study = optuna.create_study()
    for trial in trials:
        params = {name: float(trial["hparams"][name]) for name in distributions}
        value = float(trial["best_validation"]["metric"])
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value))
    found = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
    )
    return sorted(found, key=lambda name: -found[name])


class HeldJobs:
    """Experiments whose single trial runs until released, submitted by the admin."""

    def __init__(self, det: DetEnv, context: Path, release_dir: Path) -> None:
        self.det = det
        self.context = context
        self.release_dir = release_dir
        self.created: list[int] = []
        (context / "hold.py").write_text(HOLD)

    def create(self, label: str, pool: str | None = None) -> int:
        config: dict[str, Any] = {
            "name": f"ui-{label}",
            "entrypoint": "python3 hold.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
            "environment": {"environment_variables": [f"RELEASE_FILE={self.release_dir / label}"]},
            "max_restarts": 0,
        }
        if pool:
            config["resources"] = {"resource_pool": pool}
        path = self.context / f"{label}.yaml"
        path.write_text(yaml.safe_dump(config))
        experiment_id = self.det.create(path, self.context)
        self.created.append(experiment_id)
        return experiment_id

    def trial_state(self, experiment_id: int) -> str | None:
        trials = self.det.get(f"/experiments/{experiment_id}/trials")["trials"]
        return str(trials[0]["state"]) if trials else None

    def release(self, label: str) -> None:
        path = self.release_dir / label
        path.write_text("go")
        path.chmod(0o644)

    def release_all(self) -> None:
        for path in (self.release_dir / config.stem for config in self.context.glob("*.yaml")):
            path.write_text("go")
            path.chmod(0o644)


@pytest.fixture(scope="module")
def held(det: DetEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeldJobs]:
    # Trials may run as another user: the folder they poll must be readable by everyone.
    with tempfile.TemporaryDirectory(prefix="det-ui-release-") as folder:
        os.chmod(folder, 0o755)
        jobs = HeldJobs(det, tmp_path_factory.mktemp("hold"), Path(folder))
        yield jobs
        # A job may finish between asking and killing: the kill's answer does not matter, the end does.
        for experiment_id in jobs.created:
            det.det("experiment", "kill", str(experiment_id), check=False)
        jobs.release_all()
        for experiment_id in jobs.created:
            det.wait_experiment(experiment_id, timeout=300)


def ui(af: LocalAirflow, route: str) -> str:
    return f"{af.url}/det/ui/#/{route}"


def built_assets() -> list[str]:
    """The asset paths the built index.html loads (``assets/index-HASH.js`` and the like)."""
    index = STATIC / "index.html"
    assert index.is_file(), f"{index} missing: the web UI was not built (make ui)"
    found = re.findall(r"""(?:src|href)="\./(assets/[^"]+)\"""", index.read_text())
    assert found, f"no assets referenced by {index}"
    return list(found)


def row_ids(rows: Locator) -> list[int]:
    return [int(i) for i in rows.evaluate_all("rows => rows.map(r => r.dataset.id)")]


# -- access -------------------------------------------------------------------------------------


def test_anonymous_requests_get_401_and_no_content(airflow: LocalAirflow) -> None:
    paths = ["/det/ui/", "/det/ui/index.html", *(f"/det/ui/{a}" for a in built_assets())]
    with httpx.Client(base_url=airflow.url, timeout=30) as anonymous:
        for path in paths:
            r = anonymous.get(path)
            assert r.status_code == 401, f"anonymous GET {path}: HTTP {r.status_code}"
            assert "<script" not in r.text and "function" not in r.text, f"{path} leaked: {r.text[:200]}"
        for path in ("/det/api/v1/ui/resolve?dag_id=det_exp_1", "/det/api/v1/experiments/1/curves"):
            assert anonymous.get(path).status_code == 401, path
    with airflow.client() as admin:
        for path in paths:
            assert admin.get(path).status_code == 200, f"admin GET {path}"


# -- pages --------------------------------------------------------------------------------------


def test_airflow_navigation_opens_the_experiments_page(
    page: Page, airflow: LocalAirflow, curves: dict[str, Any]
) -> None:
    page.goto(f"{airflow.url}/")
    # Two nav views of one plugin share Airflow's "Plugins" menu.
    page.get_by_test_id("nav-sidebar").get_by_role("button", name="Plugins").click()
    expect(page.get_by_role("menuitem", name="Job queue")).to_be_visible()
    page.get_by_role("menuitem", name="Experiments").click()
    frame = page.frame_locator("iframe[title='Experiments']")
    row = frame.locator(f"[data-testid=experiment-row][data-id='{curves['experiment']['id']}']")
    expect(row).to_contain_text("ui-curves")
    screenshot(page, "airflow-nav-experiments")


def test_experiments_list_shows_filters_and_acts_on_experiments(
    page: Page, airflow: LocalAirflow, det: DetEnv, curves: dict[str, Any], held: HeldJobs
) -> None:
    other = held.create("listed")
    experiment_id = curves["experiment"]["id"]
    page.goto(ui(airflow, "experiments"))
    table = page.get_by_test_id("experiments-table")
    row = table.locator(f"[data-testid=experiment-row][data-id='{experiment_id}']")
    expect(row).to_contain_text("ui-curves")
    expect(row).to_contain_text("COMPLETED")
    expect(row).to_contain_text("browser-test")
    expect(table.locator(f"[data-testid=experiment-row][data-id='{other}']")).to_contain_text("ui-listed")
    screenshot(page, "experiments")

    # Bulk actions ask first, then apply to the selected rows only.
    other_row = table.locator(f"[data-testid=experiment-row][data-id='{other}']")
    other_row.get_by_test_id("select-row").check()
    page.get_by_test_id("bulk-pause").click()
    page.get_by_test_id("confirm-ok").click()
    expect(other_row).to_contain_text("PAUSED")
    expect(row).to_contain_text("COMPLETED")
    assert det.get(f"/experiments/{other}")["experiment"]["state"] == "PAUSED"
    other_row.get_by_test_id("select-row").check()
    page.get_by_test_id("bulk-activate").click()
    page.get_by_test_id("confirm-ok").click()
    expect(other_row).to_contain_text("ACTIVE")

    page.get_by_test_id("filter-name").fill("ui-curves")
    expect(table.get_by_test_id("experiment-row")).to_have_count(1)
    expect(row).to_be_visible()

    row.get_by_test_id("experiment-link").click()
    expect(page).to_have_url(re.compile(rf"#/experiments/{experiment_id}$"))


def test_experiments_list_shows_the_searcher_metric_and_its_best_value(
    page: Page, airflow: LocalAirflow, curves: dict[str, Any]
) -> None:
    best = min(t["best_validation"]["metric"] for t in curves["trials"])
    page.goto(ui(airflow, "experiments"))
    row = page.locator(f"[data-testid=experiment-row][data-id='{curves['experiment']['id']}']")
    expect(row).to_contain_text("validation_loss")
    # Opened on its own (or from Airflow's Plugins menu), the page keeps its own top bar.
    expect(page.locator("nav.topbar")).to_be_visible()
    # The page shows 4 significant digits, as JavaScript's toPrecision(4) writes them.
    expect(row).to_contain_text(f"{best:#.4g}")


def test_airflow_dag_and_task_pages_have_experiment_and_trial_tabs(
    page: Page, airflow: LocalAirflow, curves: dict[str, Any]
) -> None:
    experiment = curves["experiment"]
    page.goto(f"{airflow.url}/dags/{experiment['dag_id']}")
    page.get_by_role("link", name="Experiment", exact=True).click()
    frame = page.frame_locator("iframe[title='Experiment']")
    expect(frame.get_by_test_id("experiment-state")).to_have_text(re.compile("COMPLETED"))
    # Airflow's navigation is around the tab: the page's own top bar is left out there.
    expect(frame.locator("nav.topbar")).to_be_hidden()
    expect(frame.locator("html")).to_have_attribute("data-theme", "light")
    screenshot(page, "airflow-dag-experiment-tab")

    # Airflow's dark mode reaches the page in the tab, as Airflow's UI stores and shows it.
    page.evaluate("localStorage.setItem('theme', 'dark')")
    page.reload()
    page.get_by_role("link", name="Experiment", exact=True).click()
    expect(frame.get_by_test_id("experiment-state")).to_have_text(re.compile("COMPLETED"))
    expect(frame.locator("html")).to_have_attribute("data-theme", "dark")
    background = frame.locator("body").evaluate("b => getComputedStyle(b).backgroundColor")
    assert background == "rgb(16, 24, 40)", background
    screenshot(page, "airflow-dag-experiment-tab-dark")
    page.evaluate("localStorage.setItem('theme', 'light')")

    trial_ids = {t["id"] for t in curves["trials"]}
    page.goto(
        f"{airflow.url}/dags/{experiment['dag_id']}/runs/{experiment['dag_run_id']}/tasks/trial/mapped/0"
    )
    page.get_by_role("link", name="Trial", exact=True).click()
    heading = page.frame_locator("iframe[title='Trial']").get_by_role(
        "heading", name=re.compile(r"^Trial \d+")
    )
    expect(heading).to_be_visible()
    shown = int(re.findall(r"\d+", heading.inner_text())[0])
    assert shown in trial_ids, f"the Trial tab of map index 0 shows trial {shown}, not one of {trial_ids}"
    screenshot(page, "airflow-task-trial-tab")


def test_det_pages_in_airflow_s_frame_are_never_cut_at_the_right_edge(
    page: Page, airflow: LocalAirflow, curves: dict[str, Any]
) -> None:
    """In a narrow window a wide table scrolls inside the page: its last column can be reached, and
    the page itself is never wider than Airflow's frame (whose overflow Airflow hides)."""
    page.set_viewport_size({"width": 760, "height": 900})
    for route, table in (("det-experiments", "experiments-table"), ("det-queue", None)):
        page.goto(f"{airflow.url}/plugin/{route}")
        frame = page.frame_locator("iframe")
        body = frame.locator("body")
        expect(body.locator("main")).to_be_visible()
        if table is not None:
            expect(frame.get_by_test_id(table).locator("tbody tr").first).to_be_visible()
        page_width = body.evaluate(
            "b => [b.ownerDocument.documentElement.scrollWidth, b.ownerDocument.documentElement.clientWidth]"
        )
        assert page_width[0] <= page_width[1], (
            f"{route}: the page is {page_width[0]} px wide in a {page_width[1]} px frame"
        )
        iframe_box = page.locator("iframe").bounding_box()
        assert iframe_box is not None and iframe_box["x"] + iframe_box["width"] <= 760 + 1, iframe_box
        if table is not None:
            last = frame.get_by_test_id(table).locator("thead th").last
            frame.get_by_test_id(table).locator("xpath=..").evaluate("w => { w.scrollLeft = w.scrollWidth; }")
            expect(last).to_be_in_viewport()
    screenshot(page, "airflow-experiments-narrow")
    page.set_viewport_size({"width": 1400, "height": 900})


def test_experiment_page_draws_one_curve_per_trial(
    page: Page, airflow: LocalAirflow, curves: dict[str, Any]
) -> None:
    experiment = curves["experiment"]
    # The "Experiment" tab of the DAG's page opens #/dag/{dag_id}, which leads to the experiment.
    page.goto(ui(airflow, f"dag/{experiment['dag_id']}"))
    expect(page).to_have_url(re.compile(rf"#/experiments/{experiment['id']}$"))
    expect(page.get_by_test_id("experiment-state")).to_have_text(re.compile("COMPLETED"))
    trial_rows = page.get_by_test_id("trials-table").get_by_test_id("trial-row")
    expect(trial_rows).to_have_count(3)
    assert sorted(row_ids(trial_rows)) == sorted(t["id"] for t in curves["trials"])
    screenshot(page, "experiment-trials")

    page.get_by_role("tab", name="Curves").click()
    chart = page.get_by_test_id("curves")
    expect(chart).to_have_attribute("data-series", "3")
    expect(chart.locator("canvas").first).to_be_visible()
    screenshot(page, "experiment-curves")

    page.get_by_test_id("x-select").select_option("time")
    expect(chart).to_have_attribute("data-series", "3")
    page.get_by_test_id("log-y").check()
    expect(chart).to_have_attribute("data-series", "3")

    # One line per trial across the axes, one scatter per searched hyperparameter with a point per
    # trial; the constants are listed once and have no axis; the log hyperparameter's axis is a log one.
    page.get_by_role("tab", name="Hyperparameters").click()
    parallel = page.get_by_test_id("hp-parallel")
    expect(parallel.locator("polyline")).to_have_count(3)
    axes = parallel.get_by_test_id("hp-axis")
    expect(axes).to_have_count(3)
    assert [axes.nth(i).get_attribute("data-axis") for i in range(3)] == [
        "lr",
        "weight_decay (log)",
        "best validation_loss",
    ]
    expect(page.get_by_test_id("hp-constants")).to_have_text(
        "Constant: dropout = 0.5, global_batch_size = 32"
    )
    expect(page.get_by_test_id("hp-scatter")).to_have_count(2)
    expect(page.get_by_test_id("hp-scatter").first.locator("circle")).to_have_count(3)
    # A title too long for its place is shortened, never cut, and its tooltip has it whole.
    expect(axes.nth(2).locator("text.axis-title title")).to_have_text("best validation_loss")

    # The importance bars, in the order Optuna's fANOVA ranks the same trials.
    bars = page.get_by_test_id("importance-bar")
    expect(bars).to_have_count(2)
    shown = [bars.nth(i).get_attribute("data-hparam") for i in range(2)]
    assert shown == fanova_order(curves["trials"]), shown
    screenshot(page, "experiment-hyperparameters")

    # Brushing the top of the lr axis keeps only the trials whose lr lies there.
    lr_values = {t["id"]: float(t["hparams"]["lr"]) for t in curves["trials"]}
    area = axes.nth(0).get_by_test_id("hp-brush-area").bounding_box()
    assert area is not None
    page.mouse.move(area["x"] + area["width"] / 2, area["y"] + 1)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] / 2, area["y"] + area["height"] * 0.3, steps=4)
    page.mouse.up()
    expect(page.get_by_test_id("hp-selected")).to_contain_text("trials in the brushed ranges")
    rows = page.get_by_test_id("hp-trial-row")
    low, high = min(lr_values.values()), max(lr_values.values())
    kept_ids = sorted(int(rows.nth(i).get_attribute("data-trial") or 0) for i in range(rows.count()))
    assert max(lr_values, key=lambda k: lr_values[k]) in kept_ids
    assert all((lr_values[k] - low) / (high - low) > 0.5 for k in kept_ids), (kept_ids, lr_values)
    assert min(lr_values, key=lambda k: lr_values[k]) not in kept_ids
    expect(page.get_by_test_id("hp-selected")).to_have_text(
        f"{len(kept_ids)} of 3 trials in the brushed ranges"
    )
    page.get_by_test_id("hp-clear-brushes").click()
    expect(rows).to_have_count(3)

    # The same from the keyboard: an axis takes focus, the arrow keys brush it, Escape clears.
    area_element = axes.nth(0).get_by_test_id("hp-brush-area")
    area_element.focus()
    expect(area_element).to_be_focused()
    page.keyboard.press("ArrowUp")
    expect(page.get_by_test_id("hp-selected")).to_contain_text("trials in the brushed ranges")
    expect(axes.nth(0).locator("rect.brush")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("hp-selected")).to_have_text("3 trials")
    expect(rows).to_have_count(3)

    page.get_by_role("tab", name="Config").click()
    # As YAML, the way the config was written, not JSON.
    expect(page.get_by_test_id("config")).to_contain_text("metric: validation_loss")
    expect(page.get_by_test_id("config")).not_to_contain_text('"metric"')


def test_trial_logs_filter_by_rank(page: Page, airflow: LocalAirflow, curves: dict[str, Any]) -> None:
    experiment = curves["experiment"]
    trial_ids = [t["id"] for t in curves["trials"]]
    # The "Trial" tab of a task instance opens #/dag/{dag}/run/{run}/map/{i}, which leads to the trial.
    page.goto(ui(airflow, f"dag/{experiment['dag_id']}/run/{experiment['dag_run_id']}/map/0"))
    expect(page).to_have_url(re.compile(rf"#/trials/({'|'.join(map(str, trial_ids))})$"))
    trial_id = int(page.url.rsplit("/", 1)[1])
    # Where its runs ran: this machine, the host of the local Airflow's one worker.
    expect(page.get_by_test_id("trial-hosts")).to_have_text(f"Hosts: {socket.gethostname()}")

    logs = page.get_by_test_id("logs")
    lines = logs.get_by_test_id("log-line")
    expect(lines.filter(has_text="chief finished training")).to_have_count(1)
    expect(lines.filter(has_text="worker 1 ready")).to_have_count(1)
    screenshot(page, f"trial-{trial_id}")

    page.get_by_test_id("log-rank").select_option("1")
    expect(logs.locator("[data-testid=log-line]:not([data-rank='1'])")).to_have_count(0)
    expect(lines.filter(has_text="worker 1 ready")).to_have_count(1)
    expect(lines.filter(has_text="worker 1 has nothing to train")).to_have_count(1)
    screenshot(page, f"trial-{trial_id}-rank-1")

    page.get_by_test_id("log-rank").select_option("0")
    expect(logs.locator("[data-testid=log-line]:not([data-rank='0'])")).to_have_count(0)
    expect(lines.filter(has_text="chief finished training")).to_have_count(1)


def test_trial_logs_filter_by_level_and_text(
    page: Page, airflow: LocalAirflow, curves: dict[str, Any]
) -> None:
    trial_id = curves["trials"][0]["id"]
    page.goto(ui(airflow, f"trials/{trial_id}"))
    logs = page.get_by_test_id("logs")
    lines = logs.get_by_test_id("log-line")
    expect(lines.filter(has_text="worker 1 ready")).to_have_count(1)

    # WARNING or higher: the chief's INFO lines go, rank 1's warning stays.
    page.get_by_test_id("log-level").select_option("WARNING")
    expect(lines.filter(has_text="worker 1 has nothing to train")).to_have_count(1)
    expect(lines.filter(has_text="worker 1 ready")).to_have_count(0)
    expect(lines.filter(has_text="chief finished training")).to_have_count(0)
    screenshot(page, f"trial-{trial_id}-warnings")

    page.get_by_test_id("log-level").select_option("")
    page.get_by_test_id("log-search").fill("FINISHED TRAINING")  # any case
    expect(lines).to_have_count(1)
    expect(lines.first).to_contain_text("chief finished training")


def test_trial_logs_follow_a_running_trial(page: Page, airflow: LocalAirflow, held: HeldJobs) -> None:
    experiment_id = held.create("followed")
    wait_until(lambda: held.trial_state(experiment_id) == "RUNNING", f"experiment {experiment_id} running")
    trial_id = held.det.get(f"/experiments/{experiment_id}/trials")["trials"][0]["id"]
    page.goto(ui(airflow, f"trials/{trial_id}"))
    lines = page.get_by_test_id("logs").get_by_test_id("log-line")
    expect(lines.filter(has_text="holding until released")).to_have_count(1)
    expect(lines.filter(has_text="released")).to_have_count(1)  # only the line above, so far

    held.release("followed")

    # The page follows the trial: the last line arrives without a reload.
    expect(lines.filter(has_text="released")).to_have_count(2, timeout=60_000)
    expect(lines.last).to_contain_text("released")


def test_continue_trial_creates_a_single_trial_experiment_from_it(
    page: Page, airflow: LocalAirflow, det: DetEnv, curves: dict[str, Any]
) -> None:
    trial = curves["trials"][1]
    page.goto(ui(airflow, f"trials/{trial['id']}"))
    page.get_by_test_id("continue-trial").click()
    page.get_by_test_id("confirm-ok").click()

    expect(page).to_have_url(re.compile(r"#/experiments/\d+$"))
    created = int(page.url.rsplit("/", 1)[1])
    assert created != curves["experiment"]["id"]
    expect(page.get_by_test_id("experiment-name")).to_contain_text(f"trial {trial['id']} continued")
    experiment = det.get(f"/experiments/{created}")["experiment"]
    assert experiment["parent_id"] == curves["experiment"]["id"]
    config = det.get(f"/experiments/{created}/config")["config"]
    assert config["searcher"]["name"] == "single"
    assert config["searcher"]["source_trial_id"] == trial["id"]
    assert config["hyperparameters"]["lr"] == {"type": "const", "val": trial["hparams"]["lr"]}
    answer = det.wait_experiment(created, timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer
    (continued,) = answer["trials"]
    assert continued["hparams"] == trial["hparams"]


def test_pause_and_activate_from_the_experiment_page(
    page: Page, airflow: LocalAirflow, det: DetEnv, held: HeldJobs
) -> None:
    experiment_id = held.create("pausable")
    wait_until(lambda: held.trial_state(experiment_id) == "RUNNING", f"experiment {experiment_id} running")
    page.goto(ui(airflow, f"experiments/{experiment_id}"))
    state = page.get_by_test_id("experiment-state")
    expect(state).to_have_text(re.compile("ACTIVE"))
    expect(page.get_by_test_id("action-activate")).to_be_disabled()

    page.get_by_test_id("action-pause").click()
    expect(state).to_have_text(re.compile("PAUSED"))
    expect(page.get_by_test_id("action-activate")).to_be_enabled()
    assert det.get(f"/experiments/{experiment_id}")["experiment"]["state"] == "PAUSED"
    screenshot(page, "experiment-paused")

    page.get_by_test_id("action-activate").click()
    expect(state).to_have_text(re.compile("ACTIVE"))
    assert det.get(f"/experiments/{experiment_id}")["experiment"]["state"] == "ACTIVE"


def test_changing_a_jobs_priority_reorders_the_queue(
    page: Page, airflow: LocalAirflow, det: DetEnv, held: HeldJobs
) -> None:
    airflow.airflow("pools", "set", QUEUE_POOL, "1", "browser test queue")
    running = held.create("running", QUEUE_POOL)
    wait_until(lambda: held.trial_state(running) == "RUNNING", f"experiment {running} running")
    first, second = held.create("first", QUEUE_POOL), held.create("second", QUEUE_POOL)

    page.goto(ui(airflow, "queue"))
    table = page.locator(f"[data-testid=queue-table][data-pool='{QUEUE_POOL}']")
    rows = table.get_by_test_id("job-row")
    # Same priority: submission order.
    expect(rows).to_have_count(3)
    for position, job in enumerate((running, first, second)):
        expect(rows.nth(position)).to_have_attribute("data-id", str(job))
    screenshot(page, "queue")

    table.locator(f"[data-testid=job-row][data-id='{second}']").get_by_test_id("manage-job").click()
    page.get_by_test_id("job-priority").fill("10")
    page.get_by_test_id("job-save").click()

    # Lower runs first: the second job is now ahead of every job of priority 42.
    for position, job in enumerate((second, running, first)):
        expect(rows.nth(position)).to_have_attribute("data-id", str(job))
    listed = {job["id"]: job for job in det.get(f"/jobs?resource_pool={QUEUE_POOL}")["jobs"]}
    assert listed[second]["priority"] == 10 and listed[second]["jobs_ahead"] == 0
    screenshot(page, "queue-reordered")


def test_move_to_top_puts_a_job_first_in_its_pool(
    page: Page, airflow: LocalAirflow, det: DetEnv, held: HeldJobs
) -> None:
    pool = "det_ui_top"
    airflow.airflow("pools", "set", pool, "1", "browser test move to top")
    running = held.create("top-running", pool)
    wait_until(lambda: held.trial_state(running) == "RUNNING", f"experiment {running} running")
    first, last = held.create("top-first", pool), held.create("top-last", pool)

    page.goto(ui(airflow, "queue"))
    table = page.locator(f"[data-testid=queue-table][data-pool='{pool}']")
    rows = table.get_by_test_id("job-row")
    for position, job in enumerate((running, first, last)):
        expect(rows.nth(position)).to_have_attribute("data-id", str(job))

    table.locator(f"[data-testid=job-row][data-id='{last}']").get_by_test_id("manage-job").click()
    page.get_by_test_id("job-top").click()

    for position, job in enumerate((last, running, first)):
        expect(rows.nth(position)).to_have_attribute("data-id", str(job))
    listed = {job["id"]: job for job in det.get(f"/jobs?resource_pool={pool}")["jobs"]}
    assert listed[last]["jobs_ahead"] == 0 and listed[first]["jobs_ahead"] == 2
    screenshot(page, "queue-moved-to-top")


# One training and one validation point, then the trial ends: an ASHA trial stopped at its first rung.
ONE_POINT = """\
import det_airflow as det

with det.core.init() as core_context:
    core_context.train.report_training_metrics(10, {"loss": 0.5})
    core_context.train.report_validation_metrics(10, {"validation_loss": 0.4})
"""

# How many pixels of a canvas have the colour of the chart's first legend entry.
_COLOURED_PIXELS = """
([figure]) => {
  const legend = figure.querySelector('.legend');
  const wanted = getComputedStyle(legend).color.match(/\\d+/g).slice(0, 3).map(Number);
  let count = 0;
  for (const canvas of figure.querySelectorAll('canvas')) {
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && Math.abs(data[i] - wanted[0]) < 8 && Math.abs(data[i + 1] - wanted[1]) < 8
          && Math.abs(data[i + 2] - wanted[2]) < 8) count += 1;
    }
  }
  return count;
}
"""


def test_a_trial_of_one_point_per_metric_is_drawn(
    page: Page, airflow: LocalAirflow, det: DetEnv, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(ONE_POINT)
    config = {
        "name": "ui-one-point",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 10}},
        "max_restarts": 0,
    }
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(config))
    answer = det.wait_experiment(det.create(tmp_path / "one.yaml", tmp_path), timeout=300)
    assert answer["experiment"]["state"] == "COMPLETED", answer
    (trial,) = answer["trials"]

    page.goto(ui(airflow, f"trials/{trial['id']}"))
    figures = page.get_by_test_id("metric-chart")
    expect(figures).to_have_count(2)
    for i in range(2):
        figure = figures.nth(i)
        expect(figure.locator("canvas").first).to_be_visible()
        # The one point is a marker of the series' colour, not nothing.
        wait_until(
            lambda figure=figure: figure.evaluate_all(_COLOURED_PIXELS) > 10,
            f"a marker drawn in {figure.get_attribute('data-metric')}'s chart",
            timeout=30,
        )
    screenshot(page, "trial-one-point")
