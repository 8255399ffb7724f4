"""Lengths and periods of training for the Trainer: ``Batch(n)`` and ``Epoch(n)``."""

from __future__ import annotations

from dataclasses import dataclass

from det_airflow.errors import DetError


@dataclass(frozen=True)
class TrainUnit:
    """A number of batches or epochs (use :class:`Batch` or :class:`Epoch`)."""

    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 0:
            raise DetError(f"{type(self).__name__}: expected an integer >= 0, got {self.value!r}")

    def to_batches(self, epoch_length: int) -> int:
        """This length in batches, given the batches in one epoch."""
        raise NotImplementedError


@dataclass(frozen=True)
class Batch(TrainUnit):
    """``value`` batches (each worker trains one per-slot batch per batch)."""

    def to_batches(self, epoch_length: int) -> int:
        return self.value


@dataclass(frozen=True)
class Epoch(TrainUnit):
    """``value`` passes over the training data."""

    def to_batches(self, epoch_length: int) -> int:
        return self.value * epoch_length


def period_in_batches(period: TrainUnit | None, epoch_length: int, *, name: str) -> int | None:
    """A period in batches (None: never); a period must be at least one batch."""
    if period is None:
        return None
    if not isinstance(period, TrainUnit):
        raise DetError(f"{name}: expected Batch(n) or Epoch(n), got {period!r}")
    batches = period.to_batches(epoch_length)
    if batches < 1:
        raise DetError(f"{name}: expected a period of at least one batch, got {period!r}")
    return batches
