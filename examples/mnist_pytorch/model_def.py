"""The digits CNN of train.py as a PyTorchTrial (legacy `entrypoint: model_def:DigitsTrial`).

The Trainer does the loop: the length, validation, reporting and checkpoint periods come from the
experiment config (searcher.max_length, min_validation_period, scheduling_unit, checkpoint_policy),
and pause, preemption and resume are exact. Off-cluster, `python3 model_def.py` trains with
const_trial.yaml's settings into ./.det_local.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml
from model import build_model, load_data
from torch import nn
from torch.utils.data import TensorDataset

import det_airflow as det
from det_airflow.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext

VALIDATION_BATCH_SIZE = 90  # 4 equal batches of the 360 validation images: their mean is exact


class DigitsTrial(PyTorchTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        hparams = context.get_hparams()
        if int(hparams["n_filters1"]) < 1 or int(hparams["n_filters2"]) < 1:
            raise det.InvalidHP(
                f"n_filters1 and n_filters2 must be >= 1, got {hparams['n_filters1']}, {hparams['n_filters2']}"
            )
        torch.set_num_threads(1)  # a tiny model: more threads cost more than they give
        distributed = context.distributed
        print(
            f"worker {distributed.rank} of {distributed.size}: "
            f"{context.get_per_slot_batch_size()} images a batch",
            flush=True,
        )
        self.model = context.wrap_model(build_model(hparams))
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=float(hparams["learning_rate"]))
        )
        self.train_x, self.train_y, self.val_x, self.val_y = load_data()

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            TensorDataset(self.train_x, self.train_y),
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
            drop_last=True,
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.val_x, self.val_y), batch_size=VALIDATION_BATCH_SIZE)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        loss = nn.functional.cross_entropy(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        images, labels = batch
        logits = self.model(images)
        return {
            "validation_loss": nn.functional.cross_entropy(logits, labels),
            "accuracy": (logits.argmax(dim=1) == labels).float().mean(),
        }


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    config = yaml.safe_load((Path(__file__).resolve().parent / "const_trial.yaml").read_text())
    with det.pytorch.init(exp_conf=config) as context:
        det.pytorch.Trainer(DigitsTrial(context), context).fit()
