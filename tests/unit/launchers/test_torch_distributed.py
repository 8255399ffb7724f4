"""torch_distributed: the torchrun command from the trial's layout, and real runs with 2 CPU workers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from det_airflow.cluster_info import cluster_info_from_env
from det_airflow.launchers.torch_distributed import Layout, layout, parse_args, torchrun_command

from .conftest import free_port, wait_for_files, wait_gone

pytest.importorskip("torch")

LAUNCHER = [sys.executable, "-m", "det_airflow.launchers.torch_distributed"]


def test_overrides_come_before_a_double_dash() -> None:
    assert parse_args(["python3", "train.py", "--lr", "1"]) == ([], ["python3", "train.py", "--lr", "1"])
    overrides, script = parse_args(["--master_port", "1234", "--", "--trial", "model_def:MyTrial"])
    assert overrides == ["--master_port", "1234"]
    assert script == [sys.executable, "-m", "det_airflow.pytorch.run_trial", "model_def:MyTrial"]
    with pytest.raises(SystemExit):
        parse_args([])


def test_layout_off_cluster_and_of_a_cpu_trial() -> None:
    alone = layout(None, {})
    assert (alone.nnodes, alone.nproc_per_node, alone.node_rank, alone.master_addr) == (1, 1, 0, "127.0.0.1")
    assert layout(None, {"DET_SLOT_IDS": "[0, 1]"}).nproc_per_node == 2
    cpu_trial = cluster_info_from_env({"DET_TRIAL_ID": "1", "DET_SLOT_IDS": "[]"})
    assert layout(cpu_trial, {}).nproc_per_node == 1


def test_one_container_rendezvous_at_a_free_port() -> None:
    """Local and host-network trials share the machine: two on one fixed port would collide."""
    port = layout(None, {}).master_port
    assert port != 29400
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free when chosen


def test_layout_of_a_multi_container_trial() -> None:
    env = {
        "DET_TRIAL_ID": "1",
        "DET_SLOT_IDS": "[0, 1, 2, 3]",
        "DET_CONTAINER_ADDRS": json.dumps(["10.0.0.5", "10.0.0.6"]),
        "DET_CONTAINER_RANK": "1",
    }
    assert layout(cluster_info_from_env(env), env) == Layout(
        nnodes=2, nproc_per_node=4, node_rank=1, master_addr="10.0.0.5", master_port=29400
    )


def test_nodes_on_several_hosts_meet_at_the_chiefs_rendezvous_port() -> None:
    env = {
        "DET_TRIAL_ID": "1",
        "DET_SLOT_IDS": "[0, 1]",
        "DET_CONTAINER_ADDRS": json.dumps(["gpu-a", "gpu-b"]),
        "DET_CONTAINER_RANK": "1",
        "DET_RENDEZVOUS_PORT": "29555",
    }
    assert layout(cluster_info_from_env(env), env) == Layout(
        nnodes=2, nproc_per_node=2, node_rank=1, master_addr="gpu-a", master_port=29555
    )


def test_the_torchrun_command() -> None:
    command = torchrun_command(
        Layout(2, 4, 1, "10.0.0.5", 29400), ["--master_port", "1"], ["python3", "train.py"]
    )
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    args = command[3:]
    assert args == [
        "--nnodes", "2", "--nproc_per_node", "4", "--node_rank", "1", "--max_restarts", "0",
        "--master_addr", "10.0.0.5", "--master_port", "29400",
        "--master_port", "1",  # overrides come after ours, so they win
        "--module", "det_airflow.launchers.wrap_rank", "RANK", "python3", "train.py",
    ]  # fmt: skip


WORKER = """
import os, sys, pathlib
import det_airflow as det
from det_airflow.core import DistributedContext

dist = DistributedContext.from_torch_distributed()
ranks = dist.allgather(dist.rank)
print(f"rank {dist.rank} of {dist.size} sees {ranks}; USE_TORCH_DISTRIBUTED={os.environ['USE_TORCH_DISTRIBUTED']} "
      f"DET_CHIEF_IP={os.environ['DET_CHIEF_IP']}", flush=True)
with det.core.init(distributed=dist) as core_context:
    core_context.train.report_validation_metrics(1, {"workers": dist.size})
"""


def test_two_cpu_workers_both_report(tmp_path: Path, child_env: dict[str, str]) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    child_env.update(DET_SLOT_IDS="[0, 1]", DET_LOCAL_STORE=str(tmp_path / "store"))
    done = subprocess.run(
        [*LAUNCHER, sys.executable, "worker.py"],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        line = (
            f"[rank={rank}] rank {rank} of 2 sees [0, 1]; USE_TORCH_DISTRIBUTED=true DET_CHIEF_IP=127.0.0.1"
        )
        assert line in done.stdout.splitlines(), done.stdout
    # The chief reports for the trial: one report, not one per worker.
    assert len((tmp_path / "store" / "metrics.jsonl").read_text().splitlines()) == 1


DYING = """
import os, sys, time, pathlib
rank = int(os.environ["RANK"])
pathlib.Path(f"pid{rank}").write_text(str(os.getpid()))
if rank == 1 and os.environ.get("DIE") == "1":
    while not pathlib.Path("pid0").exists():
        time.sleep(0.05)
    sys.exit(3)
time.sleep(600)
"""


def test_a_dying_worker_ends_the_job_and_the_other_worker(tmp_path: Path, child_env: dict[str, str]) -> None:
    (tmp_path / "worker.py").write_text(DYING)
    child_env.update(DET_SLOT_IDS="[0, 1]", DIE="1")
    done = subprocess.run(
        [*LAUNCHER, "--master_port", str(free_port()), "--", sys.executable, "worker.py"],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: the survivor would sleep 600 s
    )
    assert done.returncode != 0
    survivor = int((tmp_path / "pid0").read_text())
    assert wait_gone([survivor]), "the surviving worker was left running"


def test_sigterm_to_the_launcher_stops_every_worker(tmp_path: Path, child_env: dict[str, str]) -> None:
    (tmp_path / "worker.py").write_text(DYING)
    child_env.update(DET_SLOT_IDS="[0, 1]")
    launcher = subprocess.Popen(
        [*LAUNCHER, "--master_port", str(free_port()), "--", sys.executable, "worker.py"],
        cwd=tmp_path,
        env=child_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        pid_files = [tmp_path / "pid0", tmp_path / "pid1"]
        wait_for_files(pid_files)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=120) != 0
        assert wait_gone([int(p.read_text()) for p in pid_files]), "a worker was left running"
    finally:
        launcher.kill()


def test_two_local_trials_at_once_do_not_collide(tmp_path: Path, child_env: dict[str, str]) -> None:
    (tmp_path / "worker.py").write_text("import time; time.sleep(2); print('done')\n")
    launchers = [
        subprocess.Popen(
            [*LAUNCHER, sys.executable, "worker.py"],
            cwd=tmp_path,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    for launcher in launchers:
        output, _ = launcher.communicate(timeout=300)
        assert launcher.returncode == 0, output
        assert "[rank=0] done" in output
