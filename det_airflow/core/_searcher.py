"""The searcher's operations for a trial (*seed* era): how long to train, and the metric it ended with."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from det_airflow.core._backend import Backend
from det_airflow.core._distributed import DistributedContext
from det_airflow.core._jsonable import jsonable
from det_airflow.core._train import TrainContext
from det_airflow.errors import DetError


class SearcherOperation:
    """Train until ``length`` (in the unit of ``searcher.max_length``), then report the searcher metric."""

    def __init__(self, context: SearcherContext, length: int, *, is_chief: bool) -> None:
        self._context = context
        self._length = length
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    @property
    def completed(self) -> bool:
        return self._completed

    def report_progress(self, length: float) -> None:
        """How far training got, in the same unit as ``length`` (chief only; ignored elsewhere)."""
        if self._is_chief:
            self._context._train.report_progress(float(length) / self._length if self._length else 1.0)

    def report_completed(self, searcher_metric: Any) -> None:
        """The operation is done; ``searcher_metric`` is the value of ``searcher.metric``."""
        if self._completed:
            raise DetError("report_completed was already called for this operation")
        self._completed = True
        if self._is_chief:
            self._context._train.flush()
            metric = jsonable(searcher_metric, where="searcher metric")
            self._context._backend.searcher_completed(self._length, metric)


class SearcherContext:
    """Yields the trial's searcher operations until the master says the trial is done."""

    def __init__(self, distributed: DistributedContext, backend: Backend, train: TrainContext) -> None:
        self._dist = distributed
        self._backend = backend
        self._train = train

    def operations(self, auto_ack: bool = True) -> Iterator[SearcherOperation]:
        """Iterate over operations; each must end with ``op.report_completed(metric)``.

        Every worker iterates (the chief asks the master, the others get the chief's answer).
        """
        done_length = -1
        while True:
            answer = self._backend.searcher_operation() if self._dist.is_chief else None
            length, completed = self._dist.broadcast(answer)
            # A length already completed means the master has no further operation for us.
            if completed or length <= done_length:
                return
            op = SearcherOperation(self, length, is_chief=self._dist.is_chief)
            yield op
            if not op.completed:
                raise DetError(f"the searcher operation (length {length}) ended without report_completed()")
            done_length = length
