"""Triggers: waiting on the master without holding a worker or a pool slot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from det_airflow.api.internal import AsyncInternalClient
from det_airflow.errors import APIError

# A trigger that fires within moments of its task deferring can make the scheduler fail the
# resumed task: the executor's report that the deferring process exited may be handled only after
# the resumed process started (same try number), and is then taken for a task killed externally.
# Waiting this long before the first check keeps the two apart; det's waits last minutes anyway.
MIN_WAIT_SECONDS = 10.0


class _PollingTrigger(BaseTrigger):
    def __init__(
        self,
        master: str,
        token: str,
        experiment_id: int,
        poll_interval: float = 2.0,
        min_wait: float = MIN_WAIT_SECONDS,
    ) -> None:
        super().__init__()
        self.master = master
        self.token = token
        self.experiment_id = experiment_id
        self.poll_interval = poll_interval
        self.min_wait = min_wait

    def _kwargs(self) -> dict[str, Any]:
        return {
            "master": self.master,
            "token": self.token,
            "experiment_id": self.experiment_id,
            "poll_interval": self.poll_interval,
            "min_wait": self.min_wait,
        }

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        client = AsyncInternalClient(self.master, self.token)
        await asyncio.sleep(self.min_wait)
        while True:
            try:
                payload = await self._check(client)
            except APIError as exc:
                if exc.status_code is not None and exc.status_code < 500:
                    yield TriggerEvent({"status": "error", "message": str(exc)})
                    return
                payload = None  # the API server restarts: keep waiting
            if payload is not None:
                yield TriggerEvent(payload)
                return
            await asyncio.sleep(self.poll_interval)


class ExperimentReadyTrigger(_PollingTrigger):
    """Fires once the experiment is no longer paused (its search can run)."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("det_airflow.operators.triggers.ExperimentReadyTrigger", self._kwargs())

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        status = await client.searcher_status(self.experiment_id)
        return {"status": "ready", **status} if status["ready"] else None


class TrialSlotTrigger(_PollingTrigger):
    """Fires when a trial slot has a trial to run, or the search will create no more."""

    def __init__(
        self,
        master: str,
        token: str,
        experiment_id: int,
        slot: int,
        poll_interval: float = 2.0,
        min_wait: float = MIN_WAIT_SECONDS,
    ) -> None:
        super().__init__(master, token, experiment_id, poll_interval, min_wait)
        self.slot = slot

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("det_airflow.operators.triggers.TrialSlotTrigger", {**self._kwargs(), "slot": self.slot})

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        status = await client.slot_status(self.experiment_id, self.slot)
        return None if status == "wait" else {"status": status}
