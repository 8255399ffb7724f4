"""Custom metric reduction (``MetricReducer`` and ``context.wrap_reducer``), as in Determined.

A reducer collects what the trial gives it during training or validation (``update`` is the
trial's own method), reduces it on each worker, then across workers on the chief; the result joins
the reported metrics.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from det_airflow.core import DistributedContext
from det_airflow.errors import DetError


class MetricReducer(abc.ABC):
    """A metric computed over a whole validation (or reporting period), not averaged per batch.

    Example::

        class F1(det.pytorch.MetricReducer):
            def reset(self):
                self.tp = self.fp = self.fn = 0
            def update(self, tp, fp, fn):  # called by the trial in evaluate_batch
                ...
            def per_slot_reduce(self):
                return self.tp, self.fp, self.fn
            def cross_slot_reduce(self, per_slot_metrics):
                tp, fp, fn = map(sum, zip(*per_slot_metrics))
                return tp / max(tp + (fp + fn) / 2, 1)
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Start over (called before each validation or reporting period)."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This worker's partial result (picklable)."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        """The metric from every worker's partial result: one value, or a dict of metrics."""


class _FunctionReducer(MetricReducer):
    """``wrap_reducer(fn)``: ``update(value)`` collects values; ``fn`` reduces all of them."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self._fn = fn
        self._values: list[Any] = []

    def update(self, value: Any) -> None:
        self._values.append(value)

    def reset(self) -> None:
        self._values = []

    def per_slot_reduce(self) -> list[Any]:
        return self._values

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        return self._fn([value for values in per_slot_metrics for value in values])


@dataclass(frozen=True)
class WrappedReducer:
    reducer: MetricReducer
    name: str | None
    for_training: bool
    for_validation: bool


def wrap(
    reducer: MetricReducer | Callable[[list[Any]], Any],
    name: str | None,
    *,
    for_training: bool,
    for_validation: bool,
) -> WrappedReducer:
    if not isinstance(reducer, MetricReducer):
        if not callable(reducer):
            raise DetError(
                f"wrap_reducer(): expected a MetricReducer or a function, got {type(reducer).__name__}"
            )
        if name is None:
            raise DetError("wrap_reducer(): a function reducer needs a name= for its metric")
        reducer = _FunctionReducer(reducer)
    reducer.reset()
    return WrappedReducer(reducer, name, for_training, for_validation)


def reduce_all(reducers: list[WrappedReducer], dist: DistributedContext) -> dict[str, Any]:
    """Every reducer's metric, reduced across workers (same on every worker); resets them."""
    if not reducers:
        return {}
    partials = [wrapped.reducer.per_slot_reduce() for wrapped in reducers]
    everyone = dist.allgather(partials) if dist.size > 1 else [partials]
    out: dict[str, Any] = {}
    for index, wrapped in enumerate(reducers):
        value = wrapped.reducer.cross_slot_reduce([worker[index] for worker in everyone])
        wrapped.reducer.reset()
        if wrapped.name is not None:
            out[wrapped.name] = value
        elif isinstance(value, dict):
            out.update(value)
        else:
            raise DetError(
                f"{type(wrapped.reducer).__name__}.cross_slot_reduce() returned "
                f"{type(value).__name__}: give wrap_reducer() a name= or return a dict of metrics"
            )
    return out
