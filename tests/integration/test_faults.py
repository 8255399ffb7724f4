"""Experiments survive faults mid-run, on a real Airflow and PostgreSQL. A trial process or the
Airflow task process running it killed with SIGKILL: the trial resumes from its latest checkpoint,
each training step is shown once, and no orphan trains beside the new run. The scheduler killed with
SIGKILL and restarted, the API server (and the master in it) away for longer than Airflow's default
tolerance of failed task heartbeats, or PostgreSQL restarted: the trial rides it out, with no restart
and every metric stored once."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.det_env import DetEnv, wait_until

pytestmark = pytest.mark.integration

STEPS = 60

# Reports every step, checkpoints every 10; resumes from the latest checkpoint it is given.
TRAIN = """\
import json
import os
import sys
import time

import det_airflow as det

with det.core.init() as core_context:
    start = 0
    latest = det.get_cluster_info().latest_checkpoint
    if latest:
        with core_context.checkpoint.restore_path(latest) as path:
            start = json.loads((path / "state.json").read_text())["step"]
        print(f"resumed at step {start}", flush=True)
    for op in core_context.searcher.operations():
        for step in range(start + 1, op.length + 1):
            time.sleep(0.25)
            core_context.train.report_training_metrics(step, {"loss": 1.0 / step})
            if step % 10 == 0:
                with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    if step == 20 and start == 0 and "--hang-writing" in sys.argv:
                        (path / "half.bin").write_bytes(b"x" * 1000)
                        print("writing the checkpoint of step 20", flush=True)
                        time.sleep(600)  # killed here, its files half written
                    (path / "state.json").write_text(json.dumps({"step": step}))
                op.report_progress(step)
        op.report_completed(1.0 / op.length)
"""


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def create(det: DetEnv, tmp_path: Path, label: str, steps: int = STEPS, *args: str) -> int:
    context = tmp_path / "context"
    context.mkdir()
    (context / "fault_train.py").write_text(TRAIN)
    config = {
        "name": f"fault-{label}",
        # The label names this test's trial process among every process of the machine.
        "entrypoint": " ".join(["python3 fault_train.py", label, *args]),
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": steps}},
        "max_restarts": 2,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return det.create(path, context)


def trial_processes(label: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fault_train.py" in argv and label.encode() in argv:
            found.append(int(entry.name))
    return found


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def wait_for_checkpoint_then_some(det: DetEnv, experiment_id: int) -> dict[str, Any]:
    def trial() -> dict[str, Any]:
        trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]
        ready = trials and trials[0]["latest_checkpoint"] and trials[0]["total_batches"] >= 13
        return trials[0] if ready else {}  # empty: not yet

    return wait_until(trial, f"experiment {experiment_id}'s trial past its first checkpoint", timeout=300)


def assert_completed_once(
    det: DetEnv, experiment_id: int, restarts: int = 1, steps: int = STEPS
) -> dict[str, Any]:
    answer = det.wait_experiment(experiment_id, timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer
    (trial,) = answer["trials"]
    assert trial["restarts"] == restarts, trial
    assert trial["total_batches"] == steps
    training = det.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    # Steps after a restored checkpoint were trained twice; each is shown once.
    assert [m["steps_completed"] for m in training] == list(range(1, steps + 1))
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert ("resumed at step " in logs) == (restarts > 0), logs[-2000:]
    return trial


def test_a_killed_trial_process_resumes_from_its_latest_checkpoint(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = create(det, tmp_path, "kill-trial")
    wait_for_checkpoint_then_some(det, experiment_id)
    (pid,) = wait_until(lambda: trial_processes("kill-trial"), "the trial process")

    os.kill(pid, signal.SIGKILL)

    assert_completed_once(det, experiment_id)


def test_a_trial_killed_while_writing_a_checkpoint_never_registers_it_partial(
    det: DetEnv, tmp_path: Path
) -> None:
    experiment_id = create(det, tmp_path, "kill-writing", STEPS, "--hang-writing")

    def writing() -> bool:
        trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]
        if not trials:
            return False
        logs = det.det("trial", "logs", str(trials[0]["id"]), check=False).stdout
        return "writing the checkpoint of step 20" in logs

    wait_until(writing, "the trial writing its checkpoint of step 20", timeout=300)
    (pid,) = wait_until(lambda: trial_processes("kill-writing"), "the trial process")
    os.kill(pid, signal.SIGKILL)

    trial = assert_completed_once(det, experiment_id)
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    # One checkpoint per 10 steps: the one being written when the process died was never registered;
    # the restarted run, resumed from step 10, wrote step 20's afresh.
    assert [c["steps_completed"] for c in checkpoints] == [10, 20, 30, 40, 50, 60], checkpoints
    for c in checkpoints:
        assert set(c["resources"]) == {"state.json", "metadata.json"}, c
        if c["state"] == "COMPLETED":
            folder = Path(c["storage"]["path"])
            assert json.loads((folder / "state.json").read_text()) == {"step": c["steps_completed"]}
    assert trial["latest_checkpoint"] == checkpoints[-1]["uuid"]


def test_a_killed_task_process_takes_its_trial_along_and_the_trial_resumes(
    det: DetEnv, tmp_path: Path
) -> None:
    experiment_id = create(det, tmp_path, "kill-worker")
    wait_for_checkpoint_then_some(det, experiment_id)
    (pid,) = wait_until(lambda: trial_processes("kill-worker"), "the trial process")
    task_process = parent_of(pid)

    os.kill(task_process, signal.SIGKILL)

    # No orphan trains on beside the run that replaces it.
    wait_until(lambda: pid not in trial_processes("kill-worker"), f"trial process {pid} ending with its task")
    assert_completed_once(det, experiment_id)


def stop_component(det: DetEnv, component: str) -> None:
    pid = det.af.status()[component]
    assert pid, f"the {component} is not running"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: det.af.status()[component] is None, f"the {component} gone", timeout=60)


def restart(det: DetEnv) -> None:
    det.af.start()  # starts what is not running
    det.af.wait_ready(timeout=300)


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent_of(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def test_a_killed_scheduler_restarted_costs_the_trial_nothing(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = create(det, tmp_path, "kill-scheduler")
    wait_for_checkpoint_then_some(det, experiment_id)
    (pid,) = wait_until(lambda: trial_processes("kill-scheduler"), "the trial process")
    scheduler = det.af.status()["scheduler"]
    assert scheduler
    # Its LocalExecutor workers: the one running the trial's task goes on without it.
    workers = children_of(scheduler)

    stop_component(det, "scheduler")
    restart(det)

    trial = assert_completed_once(det, experiment_id, restarts=0)
    assert pid not in trial_processes("kill-scheduler")
    assert trial["state"] == "COMPLETED"
    # The dead scheduler's idle workers wait for work that never comes; they are Airflow's to reap,
    # not this test's to leave behind.
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


#: Airflow's default ``[workers] max_failed_heartbeats``: a task supervisor that fails this many
#: heartbeats in a row kills its task. The test Airflow raises it (``det_airflow.localairflow``).
AIRFLOW_DEFAULT_MAX_FAILED_HEARTBEATS = 3


def trial_task_id(det: DetEnv, experiment_id: int) -> str:
    """Airflow's id of the task instance running the experiment's (single) trial slot."""
    experiment = det.get(f"/experiments/{experiment_id}")["experiment"]
    path = f"/api/v2/dags/{experiment['dag_id']}/dagRuns/{experiment['dag_run_id']}/taskInstances/trial/0"
    with det.api() as client:
        return str(client.get(path).raise_for_status().json()["id"])


def failed_heartbeats(log: Path, offset: int, task_id: str) -> int:
    """How many heartbeats in a row the supervisor of task instance ``task_id`` has failed, as its
    LocalExecutor worker logs them to the scheduler's log past ``offset``."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    counts = [
        int(match.group(1))
        for line in text.splitlines()
        if "Failed to send heartbeat" in line and task_id in line
        for match in [re.search(r"failed_heartbeats=(\d+)", line)]
        if match
    ]
    return max(counts, default=0)


def test_the_api_server_away_past_airflows_heartbeat_tolerance_costs_the_trial_nothing(
    det: DetEnv, tmp_path: Path
) -> None:
    """The API server stays away until the trial's task supervisor has failed as many heartbeats in
    a row as Airflow's default lets a task fail before killing it (most often 30 to 50 s), and then
    for as long as it takes to start again: the trial's reports block and retry throughout (they
    give up after 3 minutes), and the task lives on under the test Airflow's higher
    ``[workers] max_failed_heartbeats``."""
    # The trial blocks in its first report during the outage; the steps left after it keep the
    # trial running past the restart, for the check below.
    steps = 100
    experiment_id = create(det, tmp_path, "api-away", steps)
    trial = wait_for_checkpoint_then_some(det, experiment_id)
    task_id = trial_task_id(det, experiment_id)
    scheduler_log = det.af.log_file("scheduler")
    offset = scheduler_log.stat().st_size

    stop_component(det, "api-server")
    wait_until(
        lambda: failed_heartbeats(scheduler_log, offset, task_id) >= AIRFLOW_DEFAULT_MAX_FAILED_HEARTBEATS,
        f"{AIRFLOW_DEFAULT_MAX_FAILED_HEARTBEATS} failed heartbeats of the trial's task",
        timeout=180,
    )
    restart(det)

    assert det.get(f"/trials/{trial['id']}")["trial"]["state"] == "RUNNING", (
        "the trial ended during the outage"
    )
    # Reports sent while the master was away arrive once each (checked here), and no restart.
    assert_completed_once(det, experiment_id, restarts=0, steps=steps)


def test_a_postgresql_restart_costs_the_trial_nothing(
    det: DetEnv, tmp_path: Path, restart_postgres: Callable[[], None]
) -> None:
    # The restart takes seconds; the steps left after it keep the trial running for the check below.
    steps = 100
    experiment_id = create(det, tmp_path, "pg-restart", steps)
    trial = wait_for_checkpoint_then_some(det, experiment_id)

    restart_postgres()  # every connection of Airflow and the master dropped at once

    assert det.get(f"/trials/{trial['id']}")["trial"]["state"] == "RUNNING"
    assert_completed_once(det, experiment_id, restarts=0, steps=steps)
