"""The job queue on a real Airflow and PostgreSQL: a 4-slot job keeps its place in a 4-slot pool
against 1-slot jobs submitted after it, `det job list` shows the queue, and `det job update`
changes what Airflow's own task instances say."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.det_env import DetEnv, wait_until

pytestmark = pytest.mark.integration

POOL = "det_job_queue_test"
# Each trial runs until the test creates its release file: which trials run is the test's choice.
HOLD = """\
import os
import time

release = os.environ["RELEASE_FILE"]
while not os.path.exists(release):
    time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    env = DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))
    airflow.airflow("pools", "set", POOL, "4", "job queue test")
    yield env


class Jobs:
    def __init__(self, det: DetEnv, context: Path, release_dir: Path) -> None:
        self.det = det
        self.context = context
        self.release_dir = release_dir

    def create(self, label: str, slots: int) -> int:
        config = {
            "name": f"queue-{label}",
            "entrypoint": "python3 hold.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
            "resources": {"slots_per_trial": slots, "resource_pool": POOL},
            "environment": {"environment_variables": [f"RELEASE_FILE={self.release_dir / label}"]},
            "max_restarts": 0,
        }
        path = self.context.parent / f"{label}.yaml"
        path.write_text(yaml.safe_dump(config))
        return self.det.create(path, self.context)

    def release(self, label: str) -> None:
        (self.release_dir / label).write_text("go")
        (self.release_dir / label).chmod(0o644)

    def trial(self, experiment_id: int) -> dict[str, Any] | None:
        trials = self.det.get(f"/experiments/{experiment_id}/trials")["trials"]
        return trials[0] if trials else None

    def running(self, experiment_id: int) -> bool:
        trial = self.trial(experiment_id)
        return trial is not None and trial["state"] == "RUNNING"

    def listed(self) -> dict[int, dict[str, Any]]:
        return {job["id"]: job for job in self.det.get(f"/jobs?resource_pool={POOL}")["jobs"]}

    def trial_task(self, experiment_id: int) -> dict[str, Any]:
        exp = self.det.get(f"/experiments/{experiment_id}")["experiment"]
        if exp["dag_run_id"] is None:
            return {"state": None}  # its run has not started: the first trial slot to start links it
        path = f"/api/v2/dags/{exp['dag_id']}/dagRuns/{exp['dag_run_id']}/taskInstances"
        with self.det.api() as client:
            tis = client.get(path).raise_for_status().json()["task_instances"]
        return next(ti for ti in tis if ti["task_id"] == "trial")


def test_a_4_slot_job_starts_before_1_slot_jobs_submitted_after_it(
    det: DetEnv, tmp_path: Path, release_dir: Path
) -> None:
    context = tmp_path / "hold"
    context.mkdir()
    (context / "hold.py").write_text(HOLD)
    jobs = Jobs(det, context, release_dir)

    small = [jobs.create(f"small{i}", 1) for i in range(3)]
    for e in small:
        wait_until(lambda e=e: jobs.running(e), f"1-slot experiment {e} running", timeout=300)
    big = jobs.create("big", 4)
    later = jobs.create("later", 1)

    # The later 1-slot job has a free slot in the pool, asks for it and is told to wait.
    wait_until(
        lambda: jobs.trial(later) is not None and jobs.trial_task(later)["state"] == "deferred",
        f"the trial task of experiment {later} deferred, waiting for the queue",
        timeout=300,
    )
    listed = wait_until(
        lambda: (lambda j: j if big in j and j[big]["needed_slots"] == 4 else None)(jobs.listed()),
        f"experiment {big} listed with its 4-slot trial waiting",
        timeout=300,
    )
    assert [(listed[e]["jobs_ahead"], listed[e]["state"]) for e in (*small, big, later)] == [
        (0, "STATE_SCHEDULED"),
        (1, "STATE_SCHEDULED"),
        (2, "STATE_SCHEDULED"),
        (3, "STATE_QUEUED"),
        (4, "STATE_QUEUED"),
    ]
    table = det.det("job", "list", "-p", POOL).stdout
    assert "Slots (acquired/needed)" in table and "TYPE_EXPERIMENT" in table, table
    assert jobs.trial(later)["start_time"] is None  # type: ignore[index]

    # Priority changes reach Airflow: the waiting trial task's priority_weight is 100 - priority.
    det.det("job", "update", str(later), "--priority", "50")
    assert jobs.trial_task(later)["priority_weight"] == 50
    assert det.det("e", "set", "priority", str(later), "42").returncode == 0
    assert jobs.trial_task(later)["priority_weight"] == 58

    for i in range(3):
        jobs.release(f"small{i}")
    wait_until(lambda: jobs.running(big), f"4-slot experiment {big} running", timeout=300)
    assert jobs.trial(later)["start_time"] is None, "a 1-slot job submitted later started first"  # type: ignore[index]

    jobs.release("big")
    wait_until(lambda: jobs.running(later), f"experiment {later} running after the 4-slot job", timeout=300)
    jobs.release("later")
    for e in (*small, big, later):
        assert det.wait_experiment(e, timeout=300)["experiment"]["state"] == "COMPLETED"


def test_job_update_errors_are_one_line(det: DetEnv) -> None:
    result = det.det("job", "update", "999999", "--ahead-of", "999999", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["Error: experiment 999999 not found"]
