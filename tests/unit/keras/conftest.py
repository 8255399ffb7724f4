"""A trial's environment (the ``DET_*`` variables a trial process gets) around a local store."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow")

TRIAL_VARIABLES = [name for name in os.environ if name.startswith("DET_")] + ["TF_CONFIG"]


@pytest.fixture
def trial_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """``trial_env(config, hparams=..., latest_checkpoint=...)`` makes this process trial 1 of
    experiment 1 writing to a local store; answers the store folder."""
    for name in TRIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"

    def make(
        config: Mapping[str, Any],
        *,
        hparams: Mapping[str, Any] | None = None,
        latest_checkpoint: str | None = None,
        test_mode: bool = False,
    ) -> Path:
        monkeypatch.setenv("DET_TRIAL_ID", "1")
        monkeypatch.setenv("DET_EXPERIMENT_ID", "1")
        monkeypatch.setenv("DET_EXPERIMENT_CONFIG", json.dumps(config))
        monkeypatch.setenv("DET_HPARAMS", json.dumps(dict(hparams or {"global_batch_size": 8})))
        monkeypatch.setenv("DET_LOCAL_STORE", str(store))
        if latest_checkpoint is not None:
            monkeypatch.setenv("DET_LATEST_CHECKPOINT", latest_checkpoint)
        else:
            monkeypatch.delenv("DET_LATEST_CHECKPOINT", raising=False)
        if test_mode:
            monkeypatch.setenv("DET_TEST_MODE", "1")
        return store

    yield make


def records(store: Path, name: str) -> list[dict[str, Any]]:
    path = store / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
