"""torch_distributed with 8 CPU workers: a PyTorchTrial trains and every worker exits, run after run.

Teardown is where 8 ranks differ from 2: each worker leaves its collectives at its own pace, the
chief last (it writes the checkpoint and the final reports). A run must end with exit 0, not hang
while some ranks tear the process group down and others still talk. A hang shows as a run that
outlives its timeout; the workers' Python stacks are then printed (SIGUSR1, see TRIAL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import wait_gone

pytest.importorskip("torch")

LAUNCHER = [sys.executable, "-m", "det_airflow.launchers.torch_distributed"]
RANKS = 8
# Runs of the same 8 workers: a teardown hang shows in some runs only. `make test` makes 4 (about
# 2 minutes of both cores); DET_TEST_EIGHT_RANK_RUNS=20 soaks it after a change to the launcher.
RUNS = int(os.environ.get("DET_TEST_EIGHT_RANK_RUNS", "4"))
# Generous on purpose: on a 2-core machine one run of 8 workers takes about 20 s.
RUN_TIMEOUT_SECONDS = 240

TRIAL = """
import faulthandler, os, signal
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from det_airflow.pytorch import DataLoader, PyTorchTrial

faulthandler.register(signal.SIGUSR1, all_threads=True)


class TinyTrial(PyTorchTrial):
    def __init__(self, context):
        torch.set_num_threads(1)
        self.context = context
        self.model = context.wrap_model(nn.Linear(4, 1))
        self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.05))
        x = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
        self.data = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def build_training_data_loader(self):
        return DataLoader(self.data, batch_size=self.context.get_per_slot_batch_size(), drop_last=True)

    def build_validation_data_loader(self):
        return DataLoader(self.data, batch_size=32)

    def train_batch(self, batch, epoch_idx, batch_idx):
        failing = os.environ.get("FAIL_RANK")
        if failing and batch_idx == 3 and self.context.distributed.rank == int(failing):
            raise RuntimeError(f"rank {failing} fails on purpose")
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}
"""

CONFIG = {
    "name": "eight_ranks",
    "resources": {"slots_per_trial": RANKS},
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {
        "name": "single",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_length": {"batches": 6},
    },
    "min_validation_period": {"batches": 2},
    "scheduling_unit": 2,
}


def _trial_env(tmp_path: Path, child_env: dict[str, str]) -> dict[str, str]:
    (tmp_path / "model_def.py").write_text(TRIAL)
    child_env.update(
        DET_TRIAL_ID="1",
        DET_EXPERIMENT_ID="1",
        DET_HPARAMS=json.dumps(CONFIG["hyperparameters"]),
        DET_EXPERIMENT_CONFIG=json.dumps(CONFIG),
        DET_SLOT_IDS=json.dumps(list(range(RANKS))),
        DET_LOCAL_STORE=str(tmp_path / "store"),
    )
    return child_env


def _run(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    """The launcher's exit status and output; on a hang, the workers' stacks, then a failure."""
    launcher = subprocess.Popen(
        [*LAUNCHER, "--trial", "model_def:TinyTrial"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = launcher.communicate(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        workers = _workers_of(launcher.pid)
        for pid in workers:
            os.kill(pid, signal.SIGUSR1)
        os.killpg(launcher.pid, signal.SIGTERM)
        output, _ = launcher.communicate(timeout=60)
        pytest.fail(
            f"the 8-worker run hung past {RUN_TIMEOUT_SECONDS}s; workers still running: {workers}\n{output}"
        )
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    return launcher.returncode, output


def _workers_of(root: int) -> list[int]:
    """The trial processes (``run_trial``) under ``root``."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    found = []
    for pid in parents:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"det_airflow.pytorch.run_trial" in cmdline and b"wrap_rank" not in cmdline and descends(pid):
            found.append(pid)
    return found


@pytest.mark.parametrize("run", range(1, RUNS + 1))
def test_eight_workers_train_and_all_exit_0(run: int, tmp_path: Path, child_env: dict[str, str]) -> None:
    status, output = _run(tmp_path, _trial_env(tmp_path, child_env))
    assert status == 0, output
    # Every worker reached the end; the chief reported the last validation and checkpoint.
    assert "validation at batch 6" in output, output
    reports = [json.loads(line) for line in (tmp_path / "store" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("group") == "validation" and r.get("steps_completed") == 6 for r in reports), reports


def test_one_failing_worker_ends_all_eight(tmp_path: Path, child_env: dict[str, str]) -> None:
    env = _trial_env(tmp_path, child_env)
    env["FAIL_RANK"] = "5"
    status, output = _run(tmp_path, env)
    assert status != 0, output
    assert "rank 5 fails on purpose" in output, output
    assert "validation at batch 6" not in output
    pids = [int(line.split("pid: ")[1].split(")")[0]) for line in output.splitlines() if "(pid: " in line]
    assert pids and wait_gone(pids), f"workers left running: {pids}"
