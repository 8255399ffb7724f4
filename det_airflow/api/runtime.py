"""Client of the master's ``/runtime`` routes: what training code of one trial may say and ask.

One method per route of docs/master-api.md ("Training code"). Authenticated with the trial token
(``DET_SESSION_TOKEN``), valid for that trial only while its run lasts.
"""

from __future__ import annotations

from typing import Any

from det_airflow.api._http import Session


class RuntimeClient:
    """The training side's client of the master, for one trial."""

    def __init__(
        self, master: str | None, token: str | None, trial_id: int, *, session: Session | None = None
    ) -> None:
        self.trial_id = int(trial_id)
        self._session = session if session is not None else Session(master, token)
        self._trial = f"/runtime/trials/{self.trial_id}"

    @property
    def master(self) -> str:
        return self._session.master

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> RuntimeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def report_metrics(self, reports: list[dict[str, Any]]) -> None:
        """Send a batch of ``{group, steps_completed, metrics, report_time}`` reports."""
        if reports:
            self._session.post(f"{self._trial}/metrics", json={"reports": reports})

    def should_preempt(self) -> bool:
        return bool(self._session.get(f"{self._trial}/preemption")["preempt"])

    def report_progress(self, progress: float) -> None:
        self._session.post(f"{self._trial}/progress", json={"progress": float(progress)})

    def report_early_exit(self, reason: str) -> None:
        self._session.post(f"{self._trial}/early_exit", json={"reason": str(reason)})

    def register_checkpoint(
        self, uuid: str, steps_completed: int, metadata: dict[str, Any], resources: dict[str, int]
    ) -> dict[str, Any]:
        """Register a checkpoint whose files are all written; answers the Checkpoint object."""
        body = {
            "uuid": uuid,
            "steps_completed": int(steps_completed),
            "metadata": metadata,
            "resources": resources,
        }
        answer = self._session.post(f"{self._trial}/checkpoints", json=body)
        return dict((answer or {}).get("checkpoint") or {})

    def get_checkpoint(self, uuid: str) -> dict[str, Any]:
        return dict(self._session.get(f"/runtime/checkpoints/{uuid}")["checkpoint"])

    def delete_checkpoint(self, uuid: str) -> None:
        self._session.delete(f"/runtime/checkpoints/{uuid}")

    def best_validation(self) -> float | None:
        """The experiment's best searcher metric so far, or None before any validation."""
        metric = self._session.get(f"{self._trial}/best_validation").get("metric")
        return None if metric is None else float(metric)

    def searcher_operation(self) -> tuple[int, bool]:
        """The length to train to (in the unit of ``searcher.max_length``) and whether the trial is done."""
        answer = self._session.get(f"{self._trial}/searcher/operation")
        return int(answer["length"]), bool(answer["completed"])

    def searcher_completed(self, length: int, metric: float | str) -> None:
        """Report the searcher metric at the end of the operation (non-finite values as "NaN" etc.)."""
        self._session.post(
            f"{self._trial}/searcher/completed", json={"length": int(length), "metric": metric}
        )
