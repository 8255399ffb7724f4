"""Tasks in the det web UI, in a real browser against a real Airflow: a person finds a command on
the Tasks page (from Airflow's navigation too), follows it from the job queue, filters by type and
kills it; on an experiment's page in Airflow's DAG view, Open TensorBoard starts a TensorBoard of the
experiment, opens it in a new tab once it serves, and a second click opens the same one. Notebooks
and TensorBoards open on their own origins (``task-<id>.localhost``), never the master's.
Screenshots go to test-results/ui/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Page, expect

from det_airflow.localairflow import LocalAirflow
from tests.integration.det_env import DetEnv, wait_until
from tests.ui.conftest import screenshot

pytestmark = pytest.mark.integration

# A TensorBoard waits in the queue, then starts TensorBoard itself: minutes on a loaded machine.
BOARD_TIMEOUT_MS = 300_000

# One trial that reports a training loss every ten batches: TensorBoard's training/loss.
SCALARS_TRAIN = """\
import det_airflow as det

with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        for batches in range(10, op.length + 1, 10):
            core_context.train.report_training_metrics(batches, {"loss": 1.0 / batches})
            op.report_progress(batches)
        core_context.train.report_validation_metrics(op.length, {"validation_loss": 0.5})
        op.report_completed(0.5)
"""


def ui(af: LocalAirflow, route: str) -> str:
    return f"{af.url}/det/ui/#/{route}"


class Tasks:
    """Tasks started through the master's API as the admin; killed when the module ends."""

    def __init__(self, det: DetEnv) -> None:
        self.det = det
        self.created: list[int] = []

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.det.api() as client:
            task = client.post("/det/api/v1/tasks", json=body).raise_for_status().json()["task"]
        self.created.append(task["id"])
        return dict(task)

    def get(self, task_id: int) -> dict[str, Any]:
        return dict(self.det.get(f"/tasks/{task_id}")["task"])

    def kill(self, task_id: int) -> None:
        with self.det.api() as client:
            client.post(f"/det/api/v1/tasks/{task_id}/kill").raise_for_status()

    def kill_all(self) -> None:
        with self.det.api() as client:
            for task_id in self.created:
                client.post(f"/det/api/v1/tasks/{task_id}/kill")


@pytest.fixture(scope="module")
def tasks(det: DetEnv) -> Iterator[Tasks]:
    started = Tasks(det)
    yield started
    started.kill_all()


@pytest.fixture(scope="module")
def scalars(det: DetEnv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished single-trial experiment that reported three training losses."""
    context: Path = tmp_path_factory.mktemp("scalars")
    (context / "train.py").write_text(SCALARS_TRAIN)
    config = {
        "name": "ui-scalars",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 30}},
        "max_restarts": 0,
    }
    (context / "scalars.yaml").write_text(yaml.safe_dump(config))
    answer = det.wait_experiment(det.create(context / "scalars.yaml", context), timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer
    return answer


def test_airflow_navigation_opens_the_tasks_page(page: Page, airflow: LocalAirflow, tasks: Tasks) -> None:
    task = tasks.create({"type": "command", "command": ["sleep", "600"], "config": "description: ui nav\n"})
    page.goto(f"{airflow.url}/")
    page.get_by_test_id("nav-sidebar").get_by_role("button", name="Plugins").click()
    page.get_by_role("menuitem", name="Tasks").click()
    frame = page.frame_locator("iframe[title='Tasks']")
    row = frame.locator(f"[data-testid=task-row][data-id='{task['id']}']")
    expect(row).to_contain_text("ui nav")
    expect(row.get_by_test_id("task-type")).to_have_text("Command")
    screenshot(page, "airflow-nav-tasks")
    tasks.kill(task["id"])


def test_the_tasks_page_lists_a_command_and_kills_it(page: Page, airflow: LocalAirflow, tasks: Tasks) -> None:
    task = tasks.create(
        {
            "type": "command",
            "command": ["sh", "-c", "echo ui sleeper says $((6 * 7)); exec sleep 600"],
            "config": "description: ui sleeper\n",
        }
    )

    # The job queue names its type and leads to the task, not to an experiment.
    page.goto(ui(airflow, "queue"))
    job = page.locator(f"[data-testid=job-row][data-id='{task['id']}']")
    expect(job.get_by_test_id("job-type")).to_have_text("Command")
    job.get_by_test_id("job-link").click()
    expect(page).to_have_url(re.compile(rf"#/tasks/{task['id']}$"))
    expect(page.get_by_test_id("task-name")).to_contain_text(f"Command {task['id']}")
    expect(page.get_by_test_id("task-name")).to_contain_text("ui sleeper")
    # Its output is its trial's logs, once it runs (the shell's arithmetic: not the command's text).
    lines = page.get_by_test_id("logs").get_by_test_id("log-line")
    expect(lines.filter(has_text="ui sleeper says 42")).to_have_count(1, timeout=120_000)
    expect(page.get_by_test_id("task-state")).to_have_text("RUNNING")
    screenshot(page, f"task-{task['id']}")

    page.goto(ui(airflow, "tasks"))
    row = page.locator(f"[data-testid=task-row][data-id='{task['id']}']")
    expect(row.get_by_test_id("task-type")).to_have_text("Command")
    expect(row.get_by_test_id("task-owner")).to_have_text(airflow.admin_user)
    expect(row).to_contain_text("ui sleeper")
    # A command serves no page: no Open button.
    expect(row.get_by_test_id("task-open")).to_have_count(0)
    screenshot(page, "tasks")

    page.get_by_test_id("filter-task-type").select_option("notebook")
    expect(row).to_have_count(0)
    page.get_by_test_id("filter-task-type").select_option("command")
    expect(row).to_be_visible()

    row.get_by_test_id("task-kill").click()
    expect(page.get_by_role("dialog")).to_contain_text(f"Kill task {task['id']} (Command: ui sleeper)?")
    page.get_by_test_id("confirm-ok").click()
    expect(row.get_by_test_id("task-state")).to_have_text(re.compile(r"^TERMINAT(ING|ED)"))
    assert tasks.get(task["id"])["state"] in ("TERMINATING", "TERMINATED")
    # Once it has ended, the page says so and offers no Kill.
    expect(row.get_by_test_id("task-state")).to_have_text(
        re.compile(r"^TERMINATED \(\w+\)$"), timeout=120_000
    )
    expect(row.get_by_test_id("task-kill")).to_have_count(0)
    screenshot(page, "tasks-killed")


def test_the_tasks_page_opens_a_notebook_and_kills_it(
    page: Page, airflow: LocalAirflow, tasks: Tasks
) -> None:
    task = tasks.create({"type": "notebook", "config": "description: ui notebook\n"})

    page.goto(ui(airflow, "tasks"))
    row = page.locator(f"[data-testid=task-row][data-id='{task['id']}']")
    expect(row.get_by_test_id("task-type")).to_have_text("Notebook")
    expect(row).to_contain_text("ui notebook")
    # Once JupyterLab answers through the master, Open takes the user to it in a new tab.
    expect(row.get_by_test_id("task-open")).to_be_visible(timeout=BOARD_TIMEOUT_MS)
    with page.context.expect_page() as opened:
        row.get_by_test_id("task-open").click()
    lab = opened.value
    # On the task's own origin (the master is on loopback: *.localhost), never the master's.
    expect(lab).to_have_url(
        re.compile(rf"^http://task-{task['id']}\.localhost:\d+/det/proxy/{task['id']}/lab"), timeout=60_000
    )
    expect(lab.locator("#jp-main-dock-panel, .jp-LabShell").first).to_be_visible(timeout=120_000)
    screenshot(lab, f"notebook-{task['id']}")
    lab.close()

    row.get_by_test_id("task-kill").click()
    expect(page.get_by_role("dialog")).to_contain_text(f"Kill task {task['id']} (Notebook: ui notebook)?")
    page.get_by_test_id("confirm-ok").click()
    expect(row.get_by_test_id("task-state")).to_have_text(
        re.compile(r"^TERMINATED \(CANCELED\)$"), timeout=120_000
    )
    expect(row.get_by_test_id("task-open")).to_have_count(0)
    assert tasks.get(task["id"])["end_state"] == "CANCELED"


def test_open_tensorboard_on_the_experiment_tab_opens_its_scalars_in_a_new_tab(
    page: Page, airflow: LocalAirflow, det: DetEnv, tasks: Tasks, scalars: dict[str, Any]
) -> None:
    experiment = scalars["experiment"]
    trial_ids = sorted(t["id"] for t in scalars["trials"])

    def boards() -> list[dict[str, Any]]:
        listed = det.get("/tasks?type=tensorboard")["tasks"]
        return [b for b in listed if b["experiment_ids"] == [experiment["id"]] and b["state"] != "TERMINATED"]

    assert boards() == []
    # Airflow's DAG page shows the experiment in a frame sandboxed without allow-popups.
    page.goto(f"{airflow.url}/dags/{experiment['dag_id']}")
    page.get_by_role("link", name="Experiment", exact=True).click()
    frame = page.frame_locator("iframe[title='Experiment']")
    with page.context.expect_page() as opened:
        frame.get_by_test_id("open-tensorboard").click()
    tab = opened.value
    (board,) = wait_until(boards, f"a TensorBoard of experiment {experiment['id']}")
    tasks.created.append(board["id"])
    assert board["owner"] == airflow.admin_user and board["trial_ids"] == trial_ids
    expect(frame.get_by_test_id("tensorboard-status")).to_contain_text(f"TensorBoard {board['id']}")

    # The tab waits until the TensorBoard serves, then becomes it, on the TensorBoard's own origin.
    expect(tab).to_have_url(
        re.compile(rf"^http://task-{board['id']}\.localhost:\d+/det/proxy/{board['id']}/"),
        timeout=BOARD_TIMEOUT_MS,
    )
    card = tab.locator("scalar-card", has_text="training/loss").first
    expect(card).to_be_visible(timeout=BOARD_TIMEOUT_MS)
    expect(card.locator("line-chart").first).to_be_visible()
    # Its table reads the last point: the loss of 1 / 30 at step 30.
    expect(card).to_contain_text("0.0333")
    screenshot(tab, "tensorboard")
    expect(frame.get_by_test_id("tensorboard-status")).to_contain_text("ready")
    screenshot(page, "experiment-tensorboard-ready")
    tab.close()

    # Another click opens the same TensorBoard: the user runs one of exactly this experiment.
    with page.context.expect_page() as again:
        frame.get_by_test_id("open-tensorboard").click()
    expect(again.value).to_have_url(re.compile(rf"/det/proxy/{board['id']}/"), timeout=60_000)
    again.value.close()
    assert [b["id"] for b in boards()] == [board["id"]]

    # The Tasks page opens it too, outside Airflow's frame.
    page.goto(ui(airflow, "tasks"))
    row = page.locator(f"[data-testid=task-row][data-id='{board['id']}']")
    expect(row.get_by_test_id("task-type")).to_have_text("TensorBoard")
    with page.context.expect_page() as from_list:
        row.get_by_test_id("task-open").click()
    expect(from_list.value).to_have_url(re.compile(rf"/det/proxy/{board['id']}/"))
    from_list.value.close()
