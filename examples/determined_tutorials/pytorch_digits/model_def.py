"""A PyTorchTrial on scikit-learn's 8x8 digits, written against ``import determined``.

It uses what Determined's PyTorch API offers beyond the basics: ``TorchData`` annotations, a
``PyTorchCallback`` (its state is checkpointed), and a ``MetricReducer`` for accuracy over the
whole validation set.
"""

from typing import Any

import torch
from determined import pytorch
from sklearn.datasets import load_digits
from torch import nn

N_TRAIN = 1437  # the first 1437 images train, the last 360 validate


def digits(train: bool) -> torch.utils.data.TensorDataset:
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).reshape(-1, 64) / 16.0
    labels = torch.tensor(data.target, dtype=torch.long)
    part = slice(None, N_TRAIN) if train else slice(N_TRAIN, None)
    return torch.utils.data.TensorDataset(images[part], labels[part])


class Accuracy(pytorch.MetricReducer):
    """Correct answers over the whole validation set, whatever the batch sizes."""

    def reset(self) -> None:
        self.correct, self.total = 0, 0

    def update(self, correct: int, total: int) -> None:
        self.correct += correct
        self.total += total

    def per_slot_reduce(self) -> tuple[int, int]:
        return self.correct, self.total

    def cross_slot_reduce(self, per_slot_metrics: list) -> float:
        correct = sum(c for c, _ in per_slot_metrics)
        total = sum(t for _, t in per_slot_metrics)
        return correct / max(total, 1)


class EpochCounter(pytorch.PyTorchCallback):
    """Counts finished epochs across restarts (its count travels in checkpoints)."""

    def __init__(self) -> None:
        self.epochs = 0

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.epochs += 1

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        print(f"validation: accuracy {metrics['accuracy']:.3f} after {self.epochs} epoch(s)")

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs = state_dict["epochs"]


class DigitsTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        hidden = int(context.get_hparam("hidden"))
        self.model = context.wrap_model(
            nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        )
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(context.get_hparam("learning_rate")))
        )
        self.accuracy = context.wrap_reducer(Accuracy(), name="accuracy", for_training=False)

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            digits(True), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(digits(False), batch_size=self.context.get_per_slot_batch_size())

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"epochs": EpochCounter()}

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        loss = nn.functional.cross_entropy(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        output = self.model(images)
        self.accuracy.update(int((output.argmax(1) == labels).sum()), len(labels))
        return {"validation_loss": nn.functional.cross_entropy(output, labels)}
