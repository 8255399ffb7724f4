"""Reporting metrics, progress and early exits of a trial."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from det_airflow.core._backend import Backend
from det_airflow.core._distributed import DistributedContext
from det_airflow.core._jsonable import jsonable_metrics
from det_airflow.core._local import now_iso
from det_airflow.core._tensorboard import TensorBoardEvents

logger = logging.getLogger("det_airflow.core")

TRAINING = "training"
VALIDATION = "validation"


class EarlyExitReason(enum.StrEnum):
    """Why a trial stops before its searcher said so."""

    INVALID_HP = "INVALID_HP"
    USER_REQUESTED_STOP = "USER_REQUESTED_STOP"
    ERRORED = "ERRORED"


class TrainContext:
    """Reports of the chief to the master (calls on other workers are ignored).

    Training metrics are buffered and sent in batches, so reporting every batch stays cheap; the
    buffer goes out with the next validation report, before a checkpoint is registered, on close,
    and whenever it holds ``flush_every`` reports or is ``flush_interval`` seconds old.
    Validation reports are sent at once: each reaches the searcher. Every report is also written
    to the TensorBoard folder (see ``det_airflow.core._tensorboard``) when ``tensorboard`` says so;
    without one, the folder is a temporary one that nothing writes or syncs.
    """

    def __init__(
        self,
        distributed: DistributedContext,
        backend: Backend,
        *,
        flush_every: int = 100,
        flush_interval: float = 10.0,
        tensorboard: TensorBoardEvents | None = None,
    ) -> None:
        self._dist = distributed
        self._tensorboard = tensorboard if tensorboard is not None else TensorBoardEvents(write_scalars=False)
        self._backend = backend
        self._flush_every = flush_every
        self._flush_interval = flush_interval
        self._buffer: list[dict[str, Any]] = []
        self._buffer_since = 0.0

    def report_training_metrics(self, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report training metrics (buffered) after ``steps_completed`` batches."""
        self.report_metrics(TRAINING, steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report validation metrics (sent at once; the searcher sees every one)."""
        self.report_metrics(VALIDATION, steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report metrics of any group; only ``training`` reports are buffered."""
        if not self._dist.is_chief:
            return
        values = jsonable_metrics(metrics)
        report = {
            "group": str(group),
            "steps_completed": int(steps_completed),
            "metrics": values,
            "report_time": now_iso(),
        }
        self._tensorboard.add_scalars(str(group), int(steps_completed), values)
        if not self._buffer:
            self._buffer_since = time.monotonic()
        self._buffer.append(report)
        if (
            group != TRAINING
            or len(self._buffer) >= self._flush_every
            or time.monotonic() - self._buffer_since >= self._flush_interval
        ):
            self.flush()

    def _report_trial_metrics(
        self, group: str, total_batches: int, metrics: Mapping[str, Any], report_time: Any = None
    ) -> None:
        """Determined's own name for ``report_metrics`` (its generic-metrics e2e programs call it)."""
        self.report_metrics(group, total_batches, metrics)

    def flush(self) -> None:
        """Send the buffered reports now."""
        if self._buffer:
            reports, self._buffer = self._buffer, []
            self._backend.report_metrics(reports)

    def set_status(self, status: str) -> None:
        """Say in a few words what the trial is doing now (e.g. "loading data"). Written to the
        trial's log as one ``status:`` line by the chief, where ``det trial logs`` shows it."""
        if self._dist.is_chief:
            logger.info("status: %s", status)

    def report_progress(self, progress: float) -> None:
        """Report how far the trial is, as a fraction in [0, 1] (clamped)."""
        if self._dist.is_chief:
            self._backend.report_progress(min(max(float(progress), 0.0), 1.0))

    def report_early_exit(self, reason: EarlyExitReason | str) -> None:
        """Say why the trial ends early; the searcher replaces a trial with invalid hparams."""
        if self._dist.is_chief:
            self.flush()
            self._backend.report_early_exit(EarlyExitReason(reason).value)

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher metric reported so far by any trial of the experiment."""
        return self._backend.best_validation()

    def get_tensorboard_path(self) -> Path:
        """The folder (created) whose files reach the trial's TensorBoard: the reported metrics are
        written there, and training code may write its own event files there too."""
        return self._tensorboard.path

    def upload_tensorboard_files(self, selector: Callable[[Path], bool] | None = None) -> None:
        """Send the TensorBoard folder's new or changed files (those ``selector`` keeps) now, rather
        than at the next sync after a report; a failure is logged, never raised."""
        self._tensorboard.sync_now(selector)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._tensorboard.close()
