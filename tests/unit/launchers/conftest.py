"""Helpers for launcher tests: a child Python that finds this checkout, and waiting for processes."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

import det_airflow

REPO = Path(det_airflow.__file__).resolve().parent.parent
LAUNCHER_VARIABLES = [
    "DET_SLOT_IDS",
    "DET_CONTAINER_ADDRS",
    "DET_CONTAINER_RANK",
    "DET_TRIAL_ID",
    "DET_EXPERIMENT_CONFIG",
    "DET_HPARAMS",
    "DET_MASTER",
    "USE_TORCH_DISTRIBUTED",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
]


@pytest.fixture
def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(is_gone(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def wait_for_files(paths: list[Path], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() and p.read_text().strip() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"never appeared: {paths}")
        time.sleep(0.05)
