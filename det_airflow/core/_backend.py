"""Where the Core API's reports go: the master over HTTP, or a local store folder.

The sub-contexts are written once against :class:`Backend`; :mod:`._remote` and :mod:`._local` are
its two implementations, so off-cluster training runs the same code as a trial on the cluster.
Only the chief (rank 0) calls a backend, except for read-only questions.
"""

from __future__ import annotations

import abc
from typing import Any


class Backend(abc.ABC):
    """The training side's view of the master (one trial)."""

    @abc.abstractmethod
    def report_metrics(self, reports: list[dict[str, Any]]) -> None:
        """Store ``{group, steps_completed, metrics, report_time}`` reports, in order."""

    @abc.abstractmethod
    def should_preempt(self) -> bool:
        """Whether the trial should checkpoint and exit 0 now."""

    def preemption_signalled(self) -> bool | None:
        """The answer of a watcher that follows the master without being asked: True once the
        trial should stop, False while not; None when there is none (ask :meth:`should_preempt`)."""
        return None

    @abc.abstractmethod
    def report_progress(self, progress: float) -> None: ...

    def alert(self, title: str, description: str, level: str) -> None:
        """Hand an alert to the master's webhooks; off-cluster the trial log's line is all there is."""
        return None

    @abc.abstractmethod
    def report_early_exit(self, reason: str) -> None: ...

    @abc.abstractmethod
    def register_checkpoint(
        self,
        uuid: str,
        steps_completed: int,
        metadata: dict[str, Any],
        resources: dict[str, int],
        storage: dict[str, str],
    ) -> None:
        """Record a checkpoint whose files are complete (``storage`` = ``{type, path}``)."""

    @abc.abstractmethod
    def get_checkpoint(self, uuid: str) -> dict[str, Any] | None:
        """The registered Checkpoint object, or None when unknown."""

    @abc.abstractmethod
    def delete_checkpoint(self, uuid: str) -> None: ...

    @abc.abstractmethod
    def best_validation(self) -> float | None:
        """The experiment's best searcher metric so far."""

    @abc.abstractmethod
    def searcher_operation(self) -> tuple[int, bool]:
        """``(length, completed)``: the length to train to, and whether the trial's search is over."""

    @abc.abstractmethod
    def searcher_completed(self, length: int, metric: Any) -> None: ...

    @abc.abstractmethod
    def acknowledge_preemption(self) -> None:
        """Note that the trial saw the preemption signal (exit 0 afterwards means "resume me")."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""
