"""Client of the master's `/internal` routes, for det's own Airflow tasks and triggers."""

from __future__ import annotations

import base64
from typing import Any

from det_airflow.api._http import SERVICE_RETRY_SECONDS, AsyncSession, Session


class InternalClient:
    """Synchronous client used by the register, searcher and trial tasks."""

    def __init__(self, master: str, token: str, *, timeout: float = 60.0) -> None:
        self.session = Session(master, token, timeout=timeout, retry_seconds=SERVICE_RETRY_SECONDS)

    def close(self) -> None:
        self.session.close()

    def register(
        self,
        *,
        dag_id: str,
        run_id: str,
        experiment_id: int | None,
        config: str | None = None,
        context: bytes | None = None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        return self.session.post(
            "/internal/experiments/register",
            {
                "dag_id": dag_id,
                "run_id": run_id,
                "experiment_id": experiment_id,
                "config": config,
                "context": base64.b64encode(context).decode() if context is not None else None,
                "owner": owner,
            },
        )

    def searcher_status(self, experiment_id: int) -> dict[str, Any]:
        return self.session.get(f"/internal/experiments/{experiment_id}/searcher")

    def acquire(self, experiment_id: int, slot: int, task: dict[str, Any]) -> dict[str, Any]:
        return self.session.post(f"/internal/experiments/{experiment_id}/slots/{slot}/acquire", task)

    def context(self, experiment_id: int) -> bytes:
        return self.session.request("GET", f"/internal/experiments/{experiment_id}/context").content

    def trial_status(self, trial_id: int) -> dict[str, Any]:
        return self.session.get(f"/internal/trials/{trial_id}")

    def exit_trial(self, trial_id: int, exit_code: int, *, try_number: int, max_tries: int) -> dict[str, Any]:
        return self.session.post(
            f"/internal/trials/{trial_id}/exit",
            {"exit_code": exit_code, "try_number": try_number, "max_tries": max_tries},
        )

    def trial_phase(self, trial_id: int, run_id: int, state: str, reason: str) -> dict[str, Any]:
        return self.session.post(
            f"/internal/trials/{trial_id}/phase", {"run_id": run_id, "state": state, "reason": reason}
        )

    def ship_logs(self, trial_id: int, lines: list[dict[str, Any]]) -> None:
        self.session.post(f"/internal/trials/{trial_id}/logs", {"logs": lines})

    def finalize(self, experiment_id: int) -> dict[str, Any]:
        return self.session.post(f"/internal/experiments/{experiment_id}/finalize")


class AsyncInternalClient:
    """The few read-only calls triggers make while a task waits."""

    def __init__(self, master: str, token: str) -> None:
        self.master, self.token = master, token

    async def searcher_status(self, experiment_id: int) -> dict[str, Any]:
        async with AsyncSession(self.master, self.token) as session:
            return await session.request("GET", f"/internal/experiments/{experiment_id}/searcher")

    async def trial_status(self, trial_id: int) -> dict[str, Any]:
        async with AsyncSession(self.master, self.token) as session:
            return await session.request("GET", f"/internal/trials/{trial_id}")

    async def slot_status(self, experiment_id: int, slot: int) -> str:
        async with AsyncSession(self.master, self.token) as session:
            answer = await session.request(
                "POST", f"/internal/experiments/{experiment_id}/slots/{slot}/acquire?dry_run=true", json={}
            )
        return answer["status"]
