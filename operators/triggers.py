"""Triggers: waiting on the master without holding a worker or a pool slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from det_airflow.api.internal import AsyncInternalClient
from det_airflow.api.models import SlotStatus, TrialStatus
from det_airflow.errors import APIError
from det_airflow.operators.hooks import DetHook
from det_airflow.states import ExperimentState, TrialState

if TYPE_CHECKING:
    from det_airflow.operators.runners.kubernetes import AsyncKubernetesCluster, SubmittedWorkload

# A trigger that fires within moments of its task deferring can make the scheduler fail the
# resumed task: the executor's report that the deferring process exited may be handled only after
# the resumed process started (same try number), and is then taken for a task killed externally.
# Waiting this long before the first check keeps the two apart; det's waits last minutes anyway.
# An activation does not wait for it: the master starts the paused trials' slots in a new try
# (master/trials.py, `start_resumed_slots`), whose key no late report of the old process matches.
MIN_WAIT_SECONDS = 10.0
_RUN_GOING = (TrialState.PULLING, TrialState.STARTING, TrialState.RUNNING)


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
        client = DetHook(credentials=(self.master, self.token)).get_async_conn()
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
        return {"status": "ready", **status.model_dump(mode="json")} if status.ready else None


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

    def _kwargs(self) -> dict[str, Any]:
        return {**super()._kwargs(), "slot": self.slot}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"det_airflow.operators.triggers.{type(self).__name__}", self._kwargs())

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        status = await client.slot_status(self.experiment_id, self.slot)
        return None if status == SlotStatus.WAIT else {"status": status.value}


class TrialNodeTrigger(TrialSlotTrigger):
    """Waits while a node task moves to the host its node waits on (the master has sent the task
    instance to that host's queue): fires at its first look, with what the node task would be told
    on ``host`` now."""

    def __init__(
        self,
        master: str,
        token: str,
        experiment_id: int,
        slot: int,
        rank: int,
        host: str,
        poll_interval: float = 2.0,
        min_wait: float = MIN_WAIT_SECONDS,
    ) -> None:
        super().__init__(master, token, experiment_id, slot, poll_interval, min_wait)
        self.rank = rank
        self.host = host

    def _kwargs(self) -> dict[str, Any]:
        return {**super()._kwargs(), "rank": self.rank, "host": self.host}

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        answer = await client.node_status(self.experiment_id, self.slot, self.rank, self.host)
        return {"status": answer.status.value, "host": answer.host}


def stop_reason(
    status: TrialStatus,
    asked_at: float | None,
    now: float,
    preemption_timeout: float,
    run_id: int | None = None,
) -> tuple[str | None, float | None]:
    """Whether a running trial must be stopped now, from the master's ``trial_status`` answer: its
    experiment or itself was killed, one node of its multi-node run failed, the master closed its
    run ``run_id`` (when given), or it was asked to stop (pause, preemption) more than
    ``preemption_timeout`` seconds ago (``asked_at``, on the ``now`` clock) and still runs.
    Answers (why, or None; when it was first asked, or None when it is not)."""
    exp_state, trial = status.experiment_state, status.trial
    if exp_state == ExperimentState.STOPPING_KILLED or trial.state == TrialState.STOPPING_KILLED:
        return "killed", asked_at
    if status.gang_failed:
        return f"stops with its gang: {status.gang_failed}", asked_at
    if run_id is not None and (status.run_id != run_id or trial.state not in _RUN_GOING):
        return f"has no run {run_id} going any more ({trial.state})", asked_at
    preempting = (
        exp_state != ExperimentState.ACTIVE or trial.stop_requested or trial.preempt_requested_at is not None
    )
    if not preempting:
        return None, None
    asked_at = now if asked_at is None else asked_at
    if now - asked_at > preemption_timeout:
        return f"ignored preemption for {preemption_timeout}s", asked_at
    return None, asked_at


class KubernetesTrialTrigger(_PollingTrigger):
    """Watches a trial's pods from the triggerer while its task holds no worker: fires when they
    ended (``ended``), or after deleting them when the trial was killed or ignored a preemption for
    ``preemption_timeout`` seconds (``stopped``). ``workload`` is the runner's
    :class:`~det_airflow.operators.runners.kubernetes.SubmittedWorkload` as a dict.

    Polling the trial's status also lets the master preempt it for a higher-priority job, as it
    does for the trials whose task polls while it runs.
    """

    def __init__(
        self,
        master: str,
        token: str,
        experiment_id: int,
        trial_id: int,
        workload: dict[str, Any],
        kubernetes_conn_id: str | None = None,
        preemption_timeout: float = 3600.0,
        startup_timeout: float = 600.0,
        kill_grace: int = 10,
        poll_interval: float = 2.0,
        min_wait: float = MIN_WAIT_SECONDS,
    ) -> None:
        super().__init__(master, token, experiment_id, poll_interval, min_wait)
        self.trial_id = trial_id
        self.workload = workload
        self.kubernetes_conn_id = kubernetes_conn_id
        self.preemption_timeout = preemption_timeout
        self.startup_timeout = startup_timeout
        self.kill_grace = kill_grace
        self._asked_at: float | None = None
        self._seen: set[str] = set()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "det_airflow.operators.triggers.KubernetesTrialTrigger",
            {
                **self._kwargs(),
                "trial_id": self.trial_id,
                "workload": self.workload,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "preemption_timeout": self.preemption_timeout,
                "startup_timeout": self.startup_timeout,
                "kill_grace": self.kill_grace,
            },
        )

    @cached_property
    def cluster(self) -> AsyncKubernetesCluster:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        from det_airflow.operators.runners.kubernetes import AsyncKubernetesCluster

        return AsyncKubernetesCluster(AsyncKubernetesHook(conn_id=self.kubernetes_conn_id))

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        from det_airflow.operators.runners.kubernetes import SubmittedWorkload

        workload = SubmittedWorkload.from_dict(self.workload)
        pods = await self._pods(workload)
        if pods is not None and self._ended(workload, pods):
            return {"status": "ended"}
        status = await client.trial_status(self.trial_id)
        why, self._asked_at = stop_reason(status, self._asked_at, time.monotonic(), self.preemption_timeout)
        if why is None or pods is None:  # a cluster that does not answer is asked again
            return None
        self.log.warning("Trial %s %s: deleting its pods", self.trial_id, why)
        deletions = [("Job", workload.name)] if "Job" in workload.kinds else []
        deletions += [("Pod", pod.metadata.name) for pod in pods]
        for kind, name in deletions:
            if not await self._ask(
                self.cluster.delete(kind, workload.namespace, name, grace_seconds=self.kill_grace)
            ):
                return None
        return {"status": "stopped", "reason": why}

    async def _pods(self, workload: SubmittedWorkload) -> list[Any] | None:
        """The workload's pods; None while the cluster does not answer."""
        found: list[list[Any]] = []

        async def read() -> None:
            found.append(await self.cluster.pods(workload.namespace, workload.labels))

        return found[0] if await self._ask(read()) else None

    async def _ask(self, call: Awaitable[None]) -> bool:
        """Awaits a call to the cluster; False when it did not answer (it is asked again at the next
        poll). A refusal (bad credentials, no permission) raises: waiting would not cure it."""
        from aiohttp import ClientError
        from kubernetes_asyncio.client import ApiException

        try:
            await call
        except (ApiException, ClientError, OSError) as exc:
            status = getattr(exc, "status", None)
            if isinstance(status, int) and status < 500 and status != 429:
                raise
            self.log.warning("The Kubernetes cluster did not answer: %s", exc)
            return False
        return True

    def _ended(self, workload: SubmittedWorkload, pods: list[Any]) -> bool:
        """Whether the run is over: a pod failed, cannot start or was deleted; all succeeded; or
        not all started within ``startup_timeout`` of the submission."""
        from airflow.providers.cncf.kubernetes.utils.pod_manager import detect_pod_terminate_early_issues

        names = {pod.metadata.name for pod in pods}
        if self._seen - names:
            return True
        self._seen |= names
        phases = [pod.status.phase if pod.status is not None else None for pod in pods]
        if "Failed" in phases:
            return True
        if len(pods) >= workload.pods and all(phase == "Succeeded" for phase in phases):
            return True
        if any(pod.status is not None and detect_pod_terminate_early_issues(pod) for pod in pods):
            return True
        started = len(pods) >= workload.pods and all(phase in ("Running", "Succeeded") for phase in phases)
        return not started and time.time() - workload.submitted_at > self.startup_timeout
