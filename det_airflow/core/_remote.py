"""The backend of a trial on the cluster: the master's ``/runtime`` routes."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from det_airflow.api.runtime import RuntimeClient
from det_airflow.core._backend import Backend
from det_airflow.errors import APIError

logger = logging.getLogger("det_airflow.core")

# How long each long poll of the watcher lasts, and the least time between two of them (a master
# that answers at once, or an unreachable one, is not asked in a tight loop).
WATCH_POLL_SECONDS = 30.0
WATCH_MIN_INTERVAL_SECONDS = 1.0


class PreemptionWatcher:
    """A daemon thread that keeps a long poll open at the master (``GET .../preemption?
    timeout_seconds=``), as Determined's preemption watcher does: the trial learns of a pause or a
    preemption within moments of it, however seldom its code asks, and asking costs no request.

    It stops at the first yes, or when the master refuses the trial's token (its run ended);
    :attr:`ended` is then set without :attr:`signalled`, and the caller asks the master itself.
    """

    def __init__(self, client: RuntimeClient, *, poll_seconds: float) -> None:
        self._client = client
        self._poll_seconds = poll_seconds
        self.signalled = threading.Event()
        self.ended = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="det-preemption-watcher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                started = time.monotonic()
                try:
                    if self._client.wait_for_preemption(self._poll_seconds):
                        self.signalled.set()
                        return
                except APIError as exc:
                    if exc.status_code in (401, 403, 404):
                        return  # the run ended, or the trial is gone: nothing left to watch
                    logger.debug("preemption watcher: %s", exc)
                self._closing.wait(max(0.0, WATCH_MIN_INTERVAL_SECONDS - (time.monotonic() - started)))
        finally:
            self.ended.set()


class RemoteBackend(Backend):
    """Reports to the master through :class:`~det_airflow.api.runtime.RuntimeClient`.

    With ``watch``, a :class:`PreemptionWatcher` answers :meth:`preemption_signalled` from its
    first call on (a trial's Core API; other callers ask the master each time).
    """

    def __init__(self, client: RuntimeClient, *, watch: bool = False) -> None:
        self.client = client
        self._watch = watch
        self._watcher: PreemptionWatcher | None = None

    def report_metrics(self, reports: list[dict[str, Any]]) -> None:
        self.client.report_metrics(reports)

    def should_preempt(self) -> bool:
        return self.client.should_preempt()

    def preemption_signalled(self) -> bool | None:
        if not self._watch:
            return None
        if self._watcher is None:
            if self.client.should_preempt():  # the first answer is the master's own, at once
                return True
            self._watcher = PreemptionWatcher(self.client, poll_seconds=WATCH_POLL_SECONDS)
            return False
        if self._watcher.signalled.is_set():
            return True
        return None if self._watcher.ended.is_set() else False

    def report_progress(self, progress: float) -> None:
        self.client.report_progress(progress)

    def report_early_exit(self, reason: str) -> None:
        self.client.report_early_exit(reason)

    def alert(self, title: str, description: str, level: str) -> None:
        self.client.alert(title, description, level)

    def register_checkpoint(
        self,
        uuid: str,
        steps_completed: int,
        metadata: dict[str, Any],
        resources: dict[str, int],
        storage: dict[str, str],
    ) -> None:
        # The master knows the storage from the experiment config; it is not sent.
        self.client.register_checkpoint(uuid, steps_completed, metadata, resources)

    def get_checkpoint(self, uuid: str) -> dict[str, Any] | None:
        try:
            return self.client.get_checkpoint(uuid)
        except APIError as exc:
            if exc.status_code == 404:
                return None
            raise

    def delete_checkpoint(self, uuid: str) -> None:
        self.client.delete_checkpoint(uuid)

    def best_validation(self) -> float | None:
        return self.client.best_validation()

    def searcher_operation(self) -> tuple[int, bool]:
        return self.client.searcher_operation()

    def searcher_completed(self, length: int, metric: Any) -> None:
        self.client.searcher_completed(length, metric)

    def acknowledge_preemption(self) -> None:
        # The master has no route for it: a trial that exits 0 after a preemption signal is resumed.
        pass

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
        self.client.close()
