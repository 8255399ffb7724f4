"""A small CNN for 8x8 digits, and the data it trains on (scikit-learn's bundled `load_digits`)."""

from __future__ import annotations

from typing import Any

import torch
from sklearn.datasets import load_digits
from torch import nn

# A fixed split: the first 1437 images train, the last 360 validate (no downloads, no randomness).
N_TRAIN = 1437


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, validation images, validation labels); images are N x 1 x 8 x 8 in [0, 1]."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    return images[:N_TRAIN], labels[:N_TRAIN], images[N_TRAIN:], labels[N_TRAIN:]


def build_model(hparams: dict[str, Any]) -> nn.Module:
    n1, n2 = int(hparams["n_filters1"]), int(hparams["n_filters2"])
    return nn.Sequential(
        nn.Conv2d(1, n1, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(n1, n2, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Dropout(float(hparams["dropout1"])),
        nn.Flatten(),
        nn.Linear(n2 * 4 * 4, 128),
        nn.ReLU(),
        nn.Dropout(float(hparams["dropout2"])),
        nn.Linear(128, 10),
    )
