"""Small PyTorchTrials for the tests: every part of the state a checkpoint must carry is used."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from det_airflow import pytorch
from det_airflow.pytorch import LRScheduler

N_TRAIN = 100  # 13 batches of 8 per epoch (the last one short): resumes land mid-epoch
N_VALIDATION = 40


def dataset(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    y = (x.sum(dim=1) > 0).long()
    return TensorDataset(x, y)


class TinyTrial(pytorch.PyTorchTrial):
    """An MLP with dropout (draws from the global RNG), SGD with momentum (optimizer state), a
    per-batch StepLR and a per-epoch ExponentialLR (scheduler state), shuffled data."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(
            nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        )
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(context.get_hparam("lr")), momentum=0.9)
        )
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=7, gamma=0.9),
            LRScheduler.StepMode.STEP_EVERY_BATCH,
        )
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=0.95),
            LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )
        self.seen: list[int] = []  # batch_idx of every train_batch call

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            dataset(N_TRAIN, 1), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(dataset(N_VALIDATION, 2), batch_size=10)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        self.seen.append(batch_idx)
        x, y = batch
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "epoch": epoch_idx}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {
            "validation_loss": nn.functional.cross_entropy(logits, y),
            "accuracy": (logits.argmax(dim=1) == y).float().mean(),
        }


class ScriptedTrial(TinyTrial):
    """Its validation metric is taken from ``SCRIPT`` in turn (evaluate_full_dataset, no batch index)."""

    SCRIPT: list[float] = []

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self._values = iter(self.SCRIPT)

    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        assert sum(len(x) for x, _ in data_loader) == N_VALIDATION  # the chief sees all of it
        return {"validation_loss": next(self._values)}
