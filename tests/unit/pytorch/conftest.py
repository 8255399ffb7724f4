"""Fixtures for det.pytorch: a clean off-cluster environment whose local store is under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow import trial_env
from det_airflow.core._local import read_jsonl

pytest.importorskip("torch")

TRIAL_VARIABLES = [v for k, v in vars(trial_env).items() if k.isupper() and isinstance(v, str)]
TORCHRUN_VARIABLES = [
    "USE_TORCH_DISTRIBUTED",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No DET_* or torchrun variable leaks in; the current folder is fresh; the store is tmp_path/store."""
    for name in TRIAL_VARIABLES + TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(trial_env.LOCAL_STORE, str(tmp_path / "store"))
    yield


class Store:
    """What the local store under a folder holds."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def metrics(self, group: str) -> list[dict]:
        return [r for r in read_jsonl(self.path / "metrics.jsonl") if r["group"] == group]

    def steps(self, group: str) -> list[int]:
        return [r["steps_completed"] for r in self.metrics(group)]

    def checkpoints(self) -> list[dict]:
        return [r for r in read_jsonl(self.path / "checkpoints.jsonl") if r.get("state") == "COMPLETED"]

    def events(self, kind: str) -> list[dict]:
        return [r for r in read_jsonl(self.path / "events.jsonl") if r["event"] == kind]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")
