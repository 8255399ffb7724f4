"""The local runner: a trial as a process of the worker, from the master's answer to its exit code.

The worker here is not root (``os.geteuid`` says 1000), so the trial runs as the worker's own user
and no OS user is created; running as another user is covered in tests/unit/test_trial_process.py.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import update

from det_airflow import settings
from det_airflow.master import schema
from det_airflow.operators.runners import TrialLaunch, build_runner
from det_airflow.operators.runners.local import NOT_STARTED, LocalRunner
from det_airflow.operators.trial import TrialOperator
from tests.unit.master.creating import Creator, creator, tar_gz  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master, trial_logs  # noqa: F401

TRAIN = b"""\
import os, sys, time
print("trial", os.environ["DET_TRIAL_ID"], "in", os.path.basename(os.getcwd()))
print("to stderr", file=sys.stderr)
if os.environ.get("SLEEP"):
    time.sleep(60)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


class Recorded:
    """What a run told its caller: output lines and phases."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.phases: list[tuple[str, str]] = []

    def output(self, line: str, stream: str) -> None:
        self.lines.append((line, stream))

    def phase(self, state: str, why: str) -> None:
        self.phases.append((state, why))


@pytest.fixture(autouse=True)
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


def launch(tmp_path: Path, **variables: str) -> TrialLaunch:
    env = [f"{name}={value}" for name, value in variables.items()]
    spec = {
        "trial_id": 7,
        "experiment_id": 3,
        "run_id": 1,
        "config": {
            "entrypoint": f"{sys.executable} train.py",
            "environment": {"environment_variables": {"cpu": env}},
        },
    }
    return TrialLaunch.from_answer(
        spec,
        token="trial-token",
        master_url="http://127.0.0.1:9",
        workdir=tmp_path / "work" / "trial_7",
        fetch_context=lambda: tar_gz({"train.py": TRAIN}),
    )


def local_runner(values: dict[str, str] | None = None) -> tuple[LocalRunner, Recorded]:
    recorded = Recorded()
    return LocalRunner(settings.load(values or {}), on_phase=recorded.phase), recorded


def test_a_trial_runs_in_its_work_folder_and_its_output_and_start_are_reported(tmp_path: Path) -> None:
    runner, recorded = local_runner()
    trial = launch(tmp_path)

    code = runner.run_trial(trial, on_output=recorded.output, stop=threading.Event())

    assert code == 0
    assert ("trial 7 in trial_7", "stdout") in recorded.lines
    assert ("to stderr", "stderr") in recorded.lines
    assert recorded.phases == [("RUNNING", "its process starts as the worker's user")]
    assert not trial.workdir.exists(), "the work folder outlives its run"


def test_the_exit_code_is_the_processes(tmp_path: Path) -> None:
    runner, recorded = local_runner()

    assert (
        runner.run_trial(launch(tmp_path, EXIT="3"), on_output=recorded.output, stop=threading.Event()) == 3
    )


def test_stop_ends_the_process(tmp_path: Path) -> None:
    runner, recorded = local_runner()
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    try:
        code = runner.run_trial(launch(tmp_path, SLEEP="1"), on_output=recorded.output, stop=stop)
    finally:
        timer.cancel()

    assert code == -15  # SIGTERM


def test_a_trial_user_the_worker_cannot_switch_to_is_refused_in_the_trials_logs(tmp_path: Path) -> None:
    runner, recorded = local_runner({"trial_user": "det-someone"})
    trial = launch(tmp_path)

    code = runner.run_trial(trial, on_output=recorded.output, stop=threading.Event())

    assert code == NOT_STARTED
    refusals = [line for line, stream in recorded.lines if stream == "stderr" and line.startswith("error: ")]
    assert refusals and "[det] trial_user = det-someone" in refusals[0], recorded.lines
    assert recorded.phases == [], "a trial that never started was reported running"
    assert not trial.workdir.exists()


def test_the_registry_builds_the_local_runner_by_default_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_USER", "det-admin-choice")

    built = build_runner("local", {"entrypoint": "x"})

    assert isinstance(built, LocalRunner) and built.settings.trial_user == "det-admin-choice"


def test_the_trial_operator_runs_a_local_trial_and_reports_its_end(
    master: tuple[People, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, url = master
    experiment_id = app.add_experiment(owner="alice")
    config = {
        **app.experiment(experiment_id).config,
        "entrypoint": f"{sys.executable} train.py",
        "airflow": {"trial_runner": "local"},
    }
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id)
            # The search has made its one trial: once it ends, the slot has nothing left to run.
            .values(config=config, context=tar_gz({"train.py": TRAIN}), search_done=True)
        )  # fmt: skip
    trial_id = app.add_trial(experiment_id, state="QUEUED")
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(app.storage))
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT", json.dumps({"conn_type": "http", "host": url, "password": SERVICE_TOKEN})
    )
    op = TrialOperator(task_id="trial", experiment_id=experiment_id, slot=0, work_dir=str(tmp_path / "work"))
    ti = SimpleNamespace(
        id=uuid.uuid4(), task_id="trial", dag_id=f"det_{experiment_id}", run_id="r", try_number=1,
        max_tries=0, map_index=0,
    )  # fmt: skip

    result = op.execute({"ti": ti})  # type: ignore[arg-type]

    assert result == {"trials": [trial_id]}
    assert app.trial(trial_id).state == "COMPLETED"
    assert any(line == f"trial {trial_id} in trial_{trial_id}" for _, _, line in trial_logs(app, trial_id))
    assert not (tmp_path / "work" / f"exp_{experiment_id}" / f"trial_{trial_id}").exists()
