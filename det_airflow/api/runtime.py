"""Client of the master's ``/runtime`` routes: what training code of one trial may say and ask.

One method per route of docs/master-api.md ("Training code"). Authenticated with the trial token
(``DET_SESSION_TOKEN``), valid for that trial only while its run lasts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from det_airflow.api._http import SERVICE_RETRY_SECONDS, Session, TrialSession
from det_airflow.errors import APIError

if TYPE_CHECKING:
    from det_airflow.api.runtime_storage import StorageClient

# A trial's own logs are for its training; httpx (in a session passed in) would log every report.
logging.getLogger("httpx").setLevel(logging.WARNING)


class RuntimeClient:
    """The training side's client of the master, for one trial."""

    def __init__(
        self,
        master: str | None,
        token: str | None,
        trial_id: int,
        *,
        session: Session | TrialSession | None = None,
    ) -> None:
        self.trial_id = int(trial_id)
        self._session = (
            session
            if session is not None
            else TrialSession(master, token, retry_seconds=SERVICE_RETRY_SECONDS)
        )
        self._trial = f"/runtime/trials/{self.trial_id}"
        self._watch_session: TrialSession | None = None

    @property
    def master(self) -> str:
        return self._session.master

    def close(self) -> None:
        self._session.close()
        if self._watch_session is not None:
            self._watch_session.close()

    def storage(self) -> StorageClient:
        """A client of this trial's storage routes (its files in object storage, through the
        master), with a connection of its own."""
        from det_airflow.api.runtime_storage import StorageClient

        return StorageClient(self.master, self._session.token, self.trial_id)

    def __enter__(self) -> RuntimeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, body: Any = None, *, session: Session | TrialSession | None = None
    ) -> Any:
        session = session or self._session
        try:
            if method == "GET":
                return session.get(path)
            if method == "DELETE":
                return session.delete(path)
            return session.post(path, json=body)
        except APIError as exc:
            if exc.status_code == 401:
                # Not the people's login: the trial's own token, which ends with its run.
                raise APIError(
                    f"the master at {self.master} refused this trial's token (DET_SESSION_TOKEN); "
                    "the trial's run may have ended",
                    status_code=401,
                ) from None
            raise

    def report_metrics(self, reports: list[dict[str, Any]]) -> None:
        """Send a batch of ``{group, steps_completed, metrics, report_time}`` reports."""
        if reports:
            self._call("POST", f"{self._trial}/metrics", {"reports": reports})

    def should_preempt(self) -> bool:
        return bool(self._call("GET", f"{self._trial}/preemption")["preempt"])

    def wait_for_preemption(self, timeout_seconds: float) -> bool:
        """Long-poll the preemption route: True as soon as the trial should stop, False after
        ``timeout_seconds``. For one watcher thread: it has a connection of its own."""
        if self._watch_session is None:
            self._watch_session = TrialSession(
                self.master,
                self._session.token,
                timeout=timeout_seconds + 30.0,
                retry_seconds=SERVICE_RETRY_SECONDS,
            )
        path = f"{self._trial}/preemption?timeout_seconds={timeout_seconds:g}"
        return bool(self._call("GET", path, session=self._watch_session)["preempt"])

    def report_progress(self, progress: float) -> None:
        self._call("POST", f"{self._trial}/progress", {"progress": float(progress)})

    def report_early_exit(self, reason: str) -> None:
        self._call("POST", f"{self._trial}/early_exit", {"reason": str(reason)})

    def alert(self, title: str, description: str, level: str) -> None:
        """An alert of the training code, for the experiment's CUSTOM webhooks."""
        self._call(
            "POST", f"{self._trial}/alert", {"title": title, "description": description, "level": level}
        )

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
        answer = self._call("POST", f"{self._trial}/checkpoints", body)
        return dict((answer or {}).get("checkpoint") or {})

    def get_checkpoint(self, uuid: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/runtime/checkpoints/{uuid}")["checkpoint"])

    def delete_checkpoint(self, uuid: str) -> None:
        self._call("DELETE", f"/runtime/checkpoints/{uuid}")

    def best_validation(self) -> float | None:
        """The experiment's best searcher metric so far, or None before any validation."""
        metric = self._call("GET", f"{self._trial}/best_validation").get("metric")
        return None if metric is None else float(metric)

    def searcher_operation(self) -> tuple[int, bool]:
        """The length to train to (in the unit of ``searcher.max_length``) and whether the trial is done."""
        answer = self._call("GET", f"{self._trial}/searcher/operation")
        return int(answer["length"]), bool(answer["completed"])

    def searcher_completed(self, length: int, metric: float | str) -> None:
        """Report the searcher metric at the end of the operation (non-finite values as "NaN" etc.)."""
        self._call("POST", f"{self._trial}/searcher/completed", {"length": int(length), "metric": metric})

    # --- tasks (notebooks, TensorBoards, shells): what the task's program runs and where it listens ---

    def task(self) -> dict[str, Any]:
        """The task this trial runs (``TaskRuntime``): its type, what it runs, its proxy prefix, the
        address its server binds and its idle timeout."""
        return dict(self._call("GET", f"{self._trial}/task"))

    def task_ready(self, port: int, secret: str, address: str | None = None) -> None:
        """The task's server listens at ``address`` (default: the one ``task()`` named) and ``port``
        and asks the proxy for ``secret`` (header ``X-Det-Task-Secret``; Jupyter's token)."""
        body: dict[str, Any] = {"port": int(port), "secret": secret}
        if address is not None:
            body["address"] = address
        self._call("POST", f"{self._trial}/task/ready", body)
