"""The backend of a trial on the cluster: the master's ``/runtime`` routes."""

from __future__ import annotations

from typing import Any

from det_airflow.api.runtime import RuntimeClient
from det_airflow.core._backend import Backend
from det_airflow.errors import APIError


class RemoteBackend(Backend):
    """Reports to the master through :class:`~det_airflow.api.runtime.RuntimeClient`."""

    def __init__(self, client: RuntimeClient) -> None:
        self.client = client

    def report_metrics(self, reports: list[dict[str, Any]]) -> None:
        self.client.report_metrics(reports)

    def should_preempt(self) -> bool:
        return self.client.should_preempt()

    def report_progress(self, progress: float) -> None:
        self.client.report_progress(progress)

    def report_early_exit(self, reason: str) -> None:
        self.client.report_early_exit(reason)

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
        self.client.close()
