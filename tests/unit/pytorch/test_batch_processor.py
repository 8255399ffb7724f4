"""Batch inference (``pytorch.experimental.torch_batch_process``): every batch once, progress
checkpointed, a restarted trial carrying on after its last checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

from det_airflow import trial_env
from det_airflow.errors import DetError
from det_airflow.pytorch.experimental import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    torch_batch_process,
)

from .conftest import Store

DATASET = TensorDataset(torch.arange(23, dtype=torch.float32).reshape(23, 1))  # 6 batches of 4


class Doubler(TorchBatchProcessor):
    """Doubles its inputs; remembers what it saw; writes its output through upload_path at the end."""

    seen: list[int] = []
    events: list[str] = []

    def __init__(self, context: TorchBatchProcessorContext) -> None:
        self.context = context
        self.model = context.prepare_model_for_inference(torch.nn.Identity())
        self.outputs: list[float] = []

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        Doubler.seen.append(batch_idx)
        self.outputs += (self.model(batch[0]) * 2).flatten().tolist()

    def on_checkpoint_start(self) -> None:
        Doubler.events.append(f"checkpoint after {len(Doubler.seen)}")

    def on_finish(self) -> None:
        Doubler.events.append("finish")
        with self.context.upload_path() as path:
            (path / "outputs.txt").write_text(" ".join(str(int(v)) for v in self.outputs))


@pytest.fixture(autouse=True)
def fresh() -> None:
    Doubler.seen, Doubler.events = [], []


def test_every_batch_is_processed_once_with_progress_checkpointed(store: Store) -> None:
    torch_batch_process(Doubler, DATASET, batch_size=4, checkpoint_interval=2)
    assert Doubler.seen == [0, 1, 2, 3, 4, 5]
    assert Doubler.events == ["checkpoint after 2", "checkpoint after 4", "checkpoint after 6", "finish"]
    progress = [c["metadata"]["steps_completed"] for c in store.checkpoints()]
    assert progress == [2, 4, 6]  # upload_path's output is no checkpoint: it goes beside them
    output_uuid = store.checkpoints()[-1]["metadata"]["default_output_uuid"]
    output = store.path / "checkpoints" / output_uuid / "rank_0" / "outputs.txt"
    assert output.read_text() == " ".join(str(2 * i) for i in range(23))


def test_a_restarted_trial_carries_on_after_its_last_checkpoint(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch_batch_process(Doubler, DATASET, batch_size=4, checkpoint_interval=2, max_batches=4)
    assert Doubler.seen == [0, 1, 2, 3]
    latest = store.checkpoints()[1]["uuid"]  # after 4 batches
    monkeypatch.setenv(trial_env.TRIAL_ID, "1")
    monkeypatch.setenv(trial_env.EXPERIMENT_CONFIG, "{}")
    monkeypatch.setenv(trial_env.LATEST_CHECKPOINT, latest)
    Doubler.seen = []
    torch_batch_process(Doubler, DATASET, batch_size=4, checkpoint_interval=2)
    assert Doubler.seen == [4, 5]


def test_test_mode_processes_one_batch(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trial_env.TEST_MODE, "1")
    torch_batch_process(Doubler, DATASET, batch_size=4)
    assert Doubler.seen == [0]


def test_shuffling_is_refused() -> None:
    with pytest.raises(DetError, match="'shuffle' and 'sampler' are not allowed"):
        torch_batch_process(Doubler, DATASET, dataloader_kwargs={"shuffle": True})
