"""Client of the master's `/internal` routes, for det's own Airflow tasks and triggers."""

from __future__ import annotations

import base64
from typing import Any

from det_airflow.api._http import SERVICE_RETRY_SECONDS, AsyncSession, Session
from det_airflow.api.models import (
    Finalized,
    HostBeat,
    HostReport,
    Registered,
    Removal,
    RemovalDone,
    Removals,
    SearcherStatus,
    SlotAnswer,
    SlotStatus,
    TaskRef,
    TrialAnswer,
    TrialExitAnswer,
    TrialStatus,
)


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
    ) -> Registered:
        answer = self.session.post(
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
        return Registered.model_validate(answer)

    def report_host(self, host_id: str, report: HostReport) -> HostBeat:
        """A worker host's heartbeat: its inventory; the master counts its slots until the
        heartbeats stop for ``[det] host_timeout`` seconds."""
        answer = self.session.request("PUT", f"/internal/hosts/{host_id}", json=report.model_dump())
        return HostBeat.model_validate(answer.json())

    def claim_removals(self, host_id: str) -> list[Removal]:
        """File removals queued for this host (and for any host), now claimed by it."""
        return Removals.model_validate(
            self.session.post(f"/internal/hosts/{host_id}/removals/claim", {})
        ).removals

    def finish_removal(self, host_id: str, removal_id: int, not_removed: list[str]) -> None:
        """Report a claimed removal: done, or what was not removed (it is tried again later)."""
        body = RemovalDone(not_removed=not_removed).model_dump()
        self.session.post(f"/internal/hosts/{host_id}/removals/{removal_id}/done", body)

    def leave_host(self, host_id: str) -> None:
        """The host stops offering slots (its worker shuts down)."""
        self.session.request("DELETE", f"/internal/hosts/{host_id}")

    def searcher_status(self, experiment_id: int) -> SearcherStatus:
        return SearcherStatus.model_validate(
            self.session.get(f"/internal/experiments/{experiment_id}/searcher")
        )

    def acquire(self, experiment_id: int, slot: int, task: TaskRef) -> SlotAnswer:
        answer = self.session.post(
            f"/internal/experiments/{experiment_id}/slots/{slot}/acquire", task.model_dump()
        )
        return SlotAnswer.model_validate(answer)

    def acquire_node(self, experiment_id: int, slot: int, rank: int, task: TaskRef) -> SlotAnswer:
        """A node task's part of its slot's multi-node run (``run``), or ``wait`` / ``done``."""
        answer = self.session.post(
            f"/internal/experiments/{experiment_id}/slots/{slot}/nodes/{rank}/acquire", task.model_dump()
        )
        return SlotAnswer.model_validate(answer)

    def exit_node(self, trial_id: int, rank: int, run_id: int, exit_code: int) -> None:
        self.session.post(
            f"/internal/trials/{trial_id}/nodes/{rank}/exit", {"run_id": run_id, "exit_code": exit_code}
        )

    def context(self, experiment_id: int) -> bytes:
        return self.session.request("GET", f"/internal/experiments/{experiment_id}/context").content

    def trial_status(self, trial_id: int) -> TrialStatus:
        return TrialStatus.model_validate(self.session.get(f"/internal/trials/{trial_id}"))

    def exit_trial(self, trial_id: int, exit_code: int) -> TrialExitAnswer:
        answer = self.session.post(f"/internal/trials/{trial_id}/exit", {"exit_code": exit_code})
        return TrialExitAnswer.model_validate(answer)

    def trial_phase(self, trial_id: int, run_id: int, state: str, reason: str) -> TrialAnswer:
        answer = self.session.post(
            f"/internal/trials/{trial_id}/phase", {"run_id": run_id, "state": state, "reason": reason}
        )
        return TrialAnswer.model_validate(answer)

    def task_ready(self, trial_id: int, port: int, secret: str, address: str) -> None:
        """A local or Docker task's server listens on ``port``, which its runner found held by the
        task's own process."""
        self.session.post(
            f"/internal/trials/{trial_id}/task/ready", {"port": port, "secret": secret, "address": address}
        )

    def task_gone(self, trial_id: int, port: int) -> None:
        """The task's server no longer holds ``port`` (it stopped listening, or the port is not its
        own any more): the proxy stops sending people there."""
        self.session.delete(f"/internal/trials/{trial_id}/task/ready", params={"port": port})

    def ship_logs(self, trial_id: int, lines: list[dict[str, Any]]) -> None:
        self.session.post(f"/internal/trials/{trial_id}/logs", {"logs": lines})

    def finalize(self, experiment_id: int) -> Finalized:
        return Finalized.model_validate(self.session.post(f"/internal/experiments/{experiment_id}/finalize"))


class AsyncInternalClient:
    """The few read-only calls triggers make while a task waits."""

    def __init__(self, master: str, token: str) -> None:
        self.master, self.token = master, token

    async def searcher_status(self, experiment_id: int) -> SearcherStatus:
        async with AsyncSession(self.master, self.token) as session:
            answer = await session.request("GET", f"/internal/experiments/{experiment_id}/searcher")
        return SearcherStatus.model_validate(answer)

    async def trial_status(self, trial_id: int) -> TrialStatus:
        async with AsyncSession(self.master, self.token) as session:
            answer = await session.request("GET", f"/internal/trials/{trial_id}")
        return TrialStatus.model_validate(answer)

    async def node_status(self, experiment_id: int, slot: int, rank: int, host: str) -> SlotAnswer:
        """What a node task on ``host`` would be told now, without starting a node (a dry run)."""
        async with AsyncSession(self.master, self.token) as session:
            answer = await session.request(
                "POST",
                f"/internal/experiments/{experiment_id}/slots/{slot}/nodes/{rank}/acquire?dry_run=true",
                json={"host": host},
            )
        return SlotAnswer.model_validate(answer)

    async def slot_status(self, experiment_id: int, slot: int) -> SlotStatus:
        """What the slot would be told now, without taking a trial (a dry run)."""
        async with AsyncSession(self.master, self.token) as session:
            answer = await session.request(
                "POST", f"/internal/experiments/{experiment_id}/slots/{slot}/acquire?dry_run=true", json={}
            )
        return SlotAnswer.model_validate(answer).status
