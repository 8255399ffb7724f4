"""A linear regression trial and its training run, for the aggregation tests (also run under torchrun)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from det_airflow import pytorch
from det_airflow.pytorch import Batch, LRScheduler, Trainer


class LinearTrial(pytorch.PyTorchTrial):
    """A linear regression with a mean loss, plain SGD halved at every optimizer step, data in order."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        torch.manual_seed(0)
        self.model = context.wrap_model(nn.Linear(3, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(context.get_hparam("lr")))
        )
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5),
            LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP,
        )

    def _data(self) -> TensorDataset:
        generator = torch.Generator().manual_seed(7)
        x = torch.randn(32, 3, generator=generator)
        return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3)

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self._data(), batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self._data(), batch_size=16)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}


def train(
    *,
    batch_size: int,
    batches: int,
    lr: float = 0.1,
    optimizations: dict[str, Any] | None = None,
    **init: Any,
) -> tuple[dict[str, torch.Tensor], float]:
    """The trained weights and the learning rate at the end."""
    exp_conf: dict[str, Any] = {
        "searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True}
    }
    if optimizations is not None:
        exp_conf["optimizations"] = optimizations
    hparams = {"lr": lr, "global_batch_size": batch_size}
    with pytorch.init(hparams=hparams, exp_conf=exp_conf, **init) as context:
        trial = LinearTrial(context)
        Trainer(trial, context).fit(max_length=Batch(batches), reporting_period=Batch(2))
    model = (
        trial.model.module if isinstance(trial.model, nn.parallel.DistributedDataParallel) else trial.model
    )
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, trial.optimizer.param_groups[0]["lr"]
