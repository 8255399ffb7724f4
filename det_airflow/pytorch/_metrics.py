"""Averaging the metrics of many batches, and of several workers, without a sync per batch."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch

from det_airflow.core import DistributedContext
from det_airflow.errors import DetError


class MetricAverager:
    """Sums each metric over the batches it is given; tensors stay on their device until :meth:`sums`.

    Numbers and tensors are averaged; any other value (a string, say) is kept as its last value.
    """

    def __init__(self) -> None:
        self._sums: dict[str, Any] = {}
        self._counts: dict[str, int] = {}
        self._last: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._counts or self._last)

    def add(self, metrics: Any, *, where: str) -> None:
        if isinstance(metrics, torch.Tensor):
            metrics = {"loss": metrics}
        elif not isinstance(metrics, Mapping):
            raise DetError(
                f"{where} must return a dict of metric name -> value, got {type(metrics).__name__}"
            )
        sums, counts = self._sums, self._counts
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                value = value.detach()
            elif not isinstance(value, numbers.Number) or isinstance(value, bool):
                self._last[name] = value
                continue
            previous = sums.get(name)
            sums[name] = value if previous is None else previous + value
            counts[name] = counts.get(name, 0) + 1

    def sums(self) -> tuple[dict[str, Any], dict[str, int], dict[str, Any]]:
        """``(sums, counts, last values)`` as plain Python values; then starts over."""
        sums = {name: _plain(value) for name, value in self._sums.items()}
        out = (sums, dict(self._counts), dict(self._last))
        self._sums, self._counts, self._last = {}, {}, {}
        return out


def average(averager: MetricAverager, dist: DistributedContext | None = None) -> dict[str, Any]:
    """The average over every batch; with ``dist``, of every worker (a collective when there are several)."""
    sums, counts, last = averager.sums()
    if dist is not None and dist.size > 1:
        everyone = dist.allgather((sums, counts, last))
        sums, counts, last = {}, {}, {}
        for worker_sums, worker_counts, worker_last in everyone:
            for name, value in worker_sums.items():
                sums[name] = value if name not in sums else _add(sums[name], value)
                counts[name] = counts.get(name, 0) + worker_counts[name]
            last.update(worker_last)
    out = dict(last)
    out.update({name: _divide(value, counts[name]) for name, value in sums.items()})
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.float()
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, list) and isinstance(b, list):
        return [_add(x, y) for x, y in zip(a, b, strict=False)]
    return a + b


def _divide(value: Any, count: int) -> Any:
    if isinstance(value, list):
        return [_divide(v, count) for v in value]
    return value / count
