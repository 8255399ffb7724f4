"""Trial operators: one mapped task instance per trial slot (see docs/master-api.md, slot protocol)."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import threading
import time
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseOperator, Context

from det_airflow.api.internal import InternalClient
from det_airflow.api.models import SlotAnswer, SlotStatus, TaskRef
from det_airflow.errors import APIError, DetError
from det_airflow.operators._logs import LogShipper
from det_airflow.operators.hooks import DetHook
from det_airflow.operators.triggers import (
    KubernetesTrialTrigger,
    TrialNodeTrigger,
    TrialSlotTrigger,
    stop_reason,
)
from det_airflow.states import TrialState
from det_airflow.tasks import served_type

if TYPE_CHECKING:
    from det_airflow.operators.runners import TrialLaunch
    from det_airflow.operators.runners._task_ready import OnTaskReady
    from det_airflow.operators.runners.kubernetes import KubernetesRunner


def _trial_to_run(answer: SlotAnswer) -> tuple[int, dict[str, Any], str]:
    """The trial id, spec (as the runners take it) and token of a ``run`` answer."""
    if answer.trial is None or answer.spec is None or answer.token is None:
        raise DetError(f"the master answered a trial slot '{answer.status}' without the trial to run")
    return answer.trial.id, answer.spec.model_dump(), answer.token


#: A node's exit code when its task failed around the trial's process (the runner raised).
CRASHED = 1

#: What a trial slot's task instance is called in Airflow's UI and REST API (its rendered map
#: index, in place of the bare index): the slot and its trials, from the label the operator keeps
#: in its context under :data:`SLOT_LABEL_KEY` as it goes (:func:`slot_label`). Airflow renders it
#: as the task starts, defers and ends.
SLOT_LABEL_KEY = "det_slot_label"
SLOT_MAP_INDEX_TEMPLATE = "{{ det_slot_label | default('slot ' ~ task.slot) }}"
#: How many characters of a rendered map index Airflow keeps.
_LABEL_MAX = 250


def slot_label(slot: int, ran: Sequence[int], running: int | None = None) -> str:
    """``slot 2: trial 9 (ran 3, 5)`` while trial 9 runs; ``slot 2: trials 3, 5, 9`` between trials
    and at the end; ``slot 2`` before its first. Long lists keep their ends: ``1, 2, ... 90 (40)``."""

    def listed(ids: Sequence[int]) -> str:
        text = ", ".join(map(str, ids))
        if len(text) <= _LABEL_MAX - 40:
            return text
        return f"{ids[0]}, {ids[1]}, ... {ids[-1]} ({len(ids)})"

    if running is not None:
        return f"slot {slot}: trial {running}" + (f" (ran {listed(ran)})" if ran else "")
    if ran:
        return f"slot {slot}: trial{'s' if len(ran) > 1 else ''} {listed(ran)}"
    return f"slot {slot}"


def free_port() -> int:
    """A TCP port nothing listens on now, on every address of this host."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def default_work_dir() -> Path:
    from det_airflow import settings

    return settings.load().trial_work_dir


class TrialOperator(BaseOperator):
    """Runs the trials of one trial slot, one after another: asks the master for a trial, waits
    (deferred) while there is none yet, runs it, reports how it ended, and asks again until the
    search has no trial left for it. A failed run raises, so Airflow's retries (`max_restarts`)
    start it again from its latest checkpoint.

    The trial runs through the runner that ``airflow.trial_runner`` names (a local process, a Docker
    container: :mod:`det_airflow.operators.runners`). A Kubernetes trial holds no worker
    while its pods run: the task submits them and defers to a `KubernetesTrialTrigger`, then
    collects their output and exit code (`resume_kubernetes`).
    """

    template_fields: Sequence[str] = ("experiment_id",)
    ui_color = "#fde9d9"

    def __init__(
        self,
        *,
        experiment_id: Any,
        slot: int,
        master_conn_id: str = "det_default",
        preemption_timeout: int = 3600,
        poll_interval: float = 2.0,
        work_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.experiment_id = experiment_id
        self.slot = slot
        self.master_conn_id = master_conn_id
        self.preemption_timeout = preemption_timeout
        self.poll_interval = poll_interval
        self.work_dir = work_dir
        self._stop = threading.Event()
        self._context_archive: bytes | None = None

    # --- Airflow entry points ---

    def execute(self, context: Context) -> dict[str, Any] | None:
        return self._serve_slot(context, ran=[])

    def resume(
        self, context: Context, event: dict[str, Any], ran: list[int] | None = None
    ) -> dict[str, Any] | None:
        if event.get("status") == "error":
            raise RuntimeError(event["message"])
        return self._serve_slot(context, ran=list(ran or []))

    def resume_kubernetes(
        self,
        context: Context,
        event: dict[str, Any],
        ran: list[int],
        trial_id: int,
        workload: dict[str, Any],
        runner_config: dict[str, Any],
    ) -> dict[str, Any] | None:
        """The trial's pods ended (or were stopped): pass on their output, report how the trial
        ended, and go on serving the slot."""
        from det_airflow.operators.runners import CONTAINER_FAILED
        from det_airflow.operators.runners.kubernetes import SubmittedWorkload

        submitted = SubmittedWorkload.from_dict(workload)
        runner = self._kubernetes_runner(runner_config)
        status = event.get("status")
        if status == "stopped":
            self.log.warning("Trial %s %s: its pods were deleted", trial_id, event.get("reason"))
        shipper = LogShipper(self._client(), trial_id, log=self.log)

        def on_output(line: str, stream: str) -> None:
            self.log.info("%s", line)
            shipper.add(line, stream)

        try:
            code = runner.collect(submitted, on_output=on_output, stopped=status != "ended")
        except DetError as exc:
            on_output(f"ERROR: {exc}", "stderr")
            code = CONTAINER_FAILED
        finally:
            shipper.close()
            shipper.client.close()
        if status == "error":
            raise RuntimeError(event["message"])
        self.log.info("Trial %s exited with code %s", trial_id, code)
        client = self._client()
        try:
            self._report_exit(client, context, trial_id, code, ran)
        finally:
            client.close()
        return self._serve_slot(context, ran=ran)

    def on_kill(self) -> None:
        self._stop.set()

    @cached_property
    def hook(self) -> DetHook:
        """The master's connection, looked up once for the task's life."""
        return DetHook(self.master_conn_id)

    @cached_property
    def _host_id(self) -> str:
        """The worker host this task runs on (placement sends a trial's task to its host)."""
        from det_airflow import settings

        return settings.load().host_id

    @property
    def _credentials(self) -> tuple[str, str]:
        return self.hook.credentials

    def _client(self) -> InternalClient:
        return self.hook.get_conn()

    def trial_context(self, client: InternalClient, experiment_id: int) -> bytes:
        """The experiment's context archive, fetched once per task: its slot runs trial after trial
        of the same experiment, whose context never changes."""
        if self._context_archive is None:
            self._context_archive = client.context(experiment_id)
        return self._context_archive

    # --- the slot loop ---

    def _task_ref(self, context: Context) -> TaskRef:
        """This task instance, as the master records what runs a trial (or a node of one)."""
        ti = context["ti"]
        return TaskRef(
            try_number=ti.try_number,
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            map_index=ti.map_index,
            host=self._host_id,
        )

    def _serve_slot(self, context: Context, ran: list[int]) -> dict[str, Any] | None:
        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

        from det_airflow.operators.runners import runner_name

        experiment_id = int(self.experiment_id)
        task_ref = self._task_ref(context)
        client = self._client()
        labels = cast("dict[str, Any]", context)
        try:
            while True:
                labels[SLOT_LABEL_KEY] = slot_label(self.slot, ran)
                # Should the trial run over several hosts, the others join this host at that port.
                task_ref.port = free_port()
                answer = client.acquire(experiment_id, self.slot, task_ref)
                if answer.status == SlotStatus.REFUSED:
                    raise AirflowFailException(answer.message)  # a retry would be refused too
                if answer.status == SlotStatus.DONE:
                    # An earlier try of this task may have run some (an activation starts a new try).
                    ran = sorted({*ran, *(answer.ran or ())})
                    labels[SLOT_LABEL_KEY] = slot_label(self.slot, ran)
                    if ran:
                        return {"trials": ran}
                    raise AirflowSkipException(f"the search needs no trial in slot {self.slot}")
                if answer.status == SlotStatus.WAIT:
                    self._defer(TrialSlotTrigger, ran, slot=self.slot)
                trial_id, spec_dict, token = _trial_to_run(answer)
                labels[SLOT_LABEL_KEY] = slot_label(self.slot, ran, running=trial_id)
                if runner_name(spec_dict.get("config") or {}) == "kubernetes":
                    exit_code = self._submit_to_kubernetes(client, answer, ran)  # defers once submitted
                else:
                    exit_code = self._run_trial(client, spec_dict, token)
                self._report_exit(client, context, trial_id, exit_code, ran)
                # The slot goes on with the search's next trial: no Airflow task start between trials.
        finally:
            client.close()

    def _report_exit(
        self, client: InternalClient, context: Context, trial_id: int, exit_code: int, ran: list[int]
    ) -> None:
        """Tells the master how the trial's run ended and acts on its answer: raise for a restart
        (Airflow retries the slot's task) or a failure, defer while the trial is paused or preempted
        in this slot; return when the slot is free for the search's next trial."""
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        ti = context["ti"]
        max_tries = int(getattr(ti, "max_tries", 0) or 0)
        result = client.exit_trial(trial_id, exit_code)
        trial = result.trial
        state = trial.state
        if result.retry:
            why = (
                f"trial {trial_id} exited with code {exit_code}; it restarts from its latest checkpoint "
                f"(restart {trial.restarts})"
            )
            if ti.try_number <= max_tries:
                raise AirflowException(why)
            # The slot's earlier trials used its Airflow retries: the trial's own max_restarts decides.
            self.log.warning("%s in this try of the slot, which has no Airflow retry left", why)
            return
        if state == TrialState.ERROR:
            raise AirflowFailException(
                f"trial {trial_id} failed (exit code {exit_code}) after its last restart"
            )
        if state in (TrialState.PAUSED, TrialState.QUEUED):
            if trial.slot is None:
                self.log.info("Trial %s waits at its rung; this slot goes on to other trials", trial_id)
                return
            # Paused, or preempted by the job queue for a higher-priority job.
            self.log.info(
                "Trial %s %s; this slot waits (holding no pool slot) to resume it",
                trial_id,
                "paused" if state == TrialState.PAUSED else "preempted",
            )
            self._defer(TrialSlotTrigger, ran, slot=self.slot)
        self.log.info("Trial %s ended %s", trial_id, state)
        ran.append(trial_id)

    def _defer(self, trigger_cls: type, ran: list[int], **extra: Any) -> None:
        master, token = self._credentials
        self.defer(
            trigger=trigger_cls(
                master, token, int(self.experiment_id), poll_interval=self.poll_interval, **extra
            ),
            method_name="resume",
            kwargs={"ran": ran},
        )

    # --- running one trial ---

    def _kubernetes_runner(self, config: dict[str, Any]) -> KubernetesRunner:
        from det_airflow.operators.runners import build_runner

        return cast("KubernetesRunner", build_runner("kubernetes", config, log=self.log))

    def _submit_to_kubernetes(self, client: InternalClient, answer: SlotAnswer, ran: list[int]) -> int:
        """Creates the trial's pods and defers until they end; answers an exit code only when they
        could not be created (the reason in the trial's logs)."""
        from det_airflow.operators.runners import CONTAINER_FAILED

        trial_id, spec_dict, token = _trial_to_run(answer)
        # Only the settings the runner is built from travel with the deferral, not the trial's token.
        runner_config = {"airflow": dict((spec_dict.get("config") or {}).get("airflow") or {})}
        shipper = LogShipper(self._client(), trial_id, log=self.log)

        def on_output(line: str, stream: str) -> None:
            self.log.info("%s", line)
            shipper.add(line, stream)

        try:
            try:
                runner = self._kubernetes_runner(runner_config)
            except DetError as exc:
                on_output(f"ERROR: {exc}", "stderr")
                return CONTAINER_FAILED
            prepared = runner.prepare(self._launch(client, spec_dict, token), on_output=on_output)
            if prepared is None:
                return CONTAINER_FAILED
            trial, held = prepared
            try:
                workload = runner.submit(trial)
            except DetError as exc:
                on_output(f"ERROR: {exc}", "stderr")
                return CONTAINER_FAILED
            finally:
                held.release()
                # The pod fetches the context itself: the folder here only told how to start it.
                shutil.rmtree(trial.workdir, ignore_errors=True)
        finally:
            shipper.close()
            shipper.client.close()
        self.log.info(
            "Trial %s submitted as %s %s; waiting without a worker",
            trial_id,
            "/".join(workload.kinds),
            workload.name,
        )
        master, token = self._credentials
        self.defer(
            trigger=KubernetesTrialTrigger(
                master,
                token,
                int(self.experiment_id),
                trial_id,
                workload.to_dict(),
                kubernetes_conn_id=runner_config["airflow"].get("kubernetes_conn_id") or None,
                preemption_timeout=self.preemption_timeout,
                startup_timeout=runner.startup_timeout,
                kill_grace=runner.kill_grace,
                poll_interval=self.poll_interval,
            ),
            method_name="resume_kubernetes",
            kwargs={
                "ran": ran,
                "trial_id": trial_id,
                "workload": workload.to_dict(),
                "runner_config": runner_config,
            },
        )

    def _run_trial(self, client: InternalClient, spec_dict: dict[str, Any], token: str) -> int:
        """Runs one trial to its end through the runner its config names, its output going to the
        task log and ``det trial logs``; answers its exit code."""
        from det_airflow.operators.runners import CONTAINER_FAILED, build_runner, runner_name

        launch = self._launch(client, spec_dict, token)
        spec = launch.spec
        shipper = LogShipper(self._client(), spec.trial_id, log=self.log)

        def on_output(line: str, stream: str) -> None:
            self.log.info("%s", line)
            shipper.add(line, stream)

        def on_phase(state: str, why: str) -> None:
            self.report_phase(client, spec.trial_id, spec.run_id, state, why)

        self._stop.clear()
        # A node of a run over several hosts also stops when that run ends or one of its nodes fails.
        watched_run = spec.run_id if spec.gang else None
        watcher = threading.Thread(target=self._watch, args=(spec.trial_id, watched_run), daemon=True)
        watcher.start()
        try:
            try:
                runner = build_runner(
                    runner_name(spec.config),
                    spec.config,
                    log=self.log,
                    # `det trial logs` names the container each line came from, as Determined's does.
                    on_container=lambda cid: setattr(shipper, "container_id", cid[:12]),
                    on_phase=on_phase,
                )
            except DetError as exc:
                # A runner this worker refuses for the trial (its policy): said where the user looks.
                on_output(f"ERROR: {exc}", "stderr")
                return CONTAINER_FAILED
            code = runner.run_trial(launch, on_output=on_output, stop=self._stop)
        finally:
            self._stop.set()
            shipper.close()
            shipper.client.close()
        self.log.info("Trial %s exited with code %s", spec.trial_id, code)
        return code

    def _launch(self, client: InternalClient, spec_dict: dict[str, Any], token: str) -> TrialLaunch:
        """The run of the trial the master answered, as a runner takes it: its work folder under
        this task's ``work_dir`` and the experiment's context fetched through ``client``."""
        from det_airflow.operators.runners import TrialLaunch

        experiment_id, trial_id = int(spec_dict["experiment_id"]), int(spec_dict["trial_id"])
        master, _ = self._credentials
        launch = TrialLaunch.from_answer(
            spec_dict,
            token=token,
            master_url=master,
            workdir=self._trial_dir(experiment_id, trial_id),
            fetch_context=lambda: self.trial_context(client, experiment_id),
        )
        if served_type((spec_dict.get("config") or {}).get("labels")) is not None:
            launch = dataclasses.replace(launch, on_task_ready=self._task_ready_reporter(trial_id))
        return launch

    def _task_ready_reporter(self, trial_id: int) -> OnTaskReady:
        """How the runner tells the master, with det's service token, where a task's server listens
        once it found the port held by the task's own process, and that it no longer does
        (runners/_task_ready.py)."""
        from det_airflow.operators.runners._task_ready import OnTaskReady

        def ready(port: int, secret: str, address: str) -> None:
            client = self._client()  # of the runner's watch thread: a connection of its own
            try:
                client.task_ready(trial_id, port, secret, address)
            finally:
                client.close()
            self.log.info("Trial %s: its task's server listens on port %s", trial_id, port)

        def gone(port: int) -> None:
            client = self._client()
            try:
                client.task_gone(trial_id, port)
            finally:
                client.close()
            self.log.warning("Trial %s: its task's server no longer holds port %s", trial_id, port)

        return OnTaskReady(ready=ready, gone=gone)

    def _trial_dir(self, experiment_id: int, trial_id: int) -> Path:
        """The trial's work folder on this host."""
        return Path(self.work_dir or default_work_dir()) / f"exp_{experiment_id}" / f"trial_{trial_id}"

    def report_phase(self, client: InternalClient, trial_id: int, run_id: int, state: str, why: str) -> None:
        """Tells the master where the run's start is (PULLING, STARTING, RUNNING); the run goes on
        if the master cannot be told (the trial's own first report marks it RUNNING then)."""
        try:
            client.trial_phase(trial_id, run_id, state, why)
        except APIError as exc:
            self.log.warning("Could not tell the master trial %s is %s: %s", trial_id, state, exc)

    def _watch(self, trial_id: int, run_id: int | None = None) -> None:
        """Kill the trial's process when its experiment is killed, when it ignores a preemption, or
        (a run over several hosts, ``run_id``) when one of its nodes failed or its run was closed."""
        client = self._client()
        asked_at: float | None = None
        try:
            while not self._stop.wait(5.0):
                try:
                    status = client.trial_status(trial_id)
                except APIError:
                    continue
                why, asked_at = stop_reason(
                    status, asked_at, time.monotonic(), self.preemption_timeout, run_id=run_id
                )
                if why is not None:
                    self.log.warning("Trial %s %s: stopping it now", trial_id, why)
                    self._stop.set()
                    return
        finally:
            client.close()


class TrialNodeOperator(TrialOperator):
    """Runs, for one trial slot, node ``rank`` of its multi-node runs: a trial larger than every
    worker host runs as a gang over several (master/gangs.py). The slot's own task runs the chief;
    the master starts this task on the host placed for the node when a run needs it. It runs that
    node's part of the run through the trial's runner, reports how it ended, and ends when no run
    needs it any more (skipped if it ran none): the master starts it again, in a new try, for the
    next run that does.
    """

    ui_color = "#fbe5d6"

    def __init__(self, *, rank: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rank = rank

    def _serve_slot(self, context: Context, ran: list[int]) -> dict[str, Any] | None:
        from airflow.sdk.exceptions import AirflowSkipException

        experiment_id = int(self.experiment_id)
        task_ref = self._task_ref(context)
        client = self._client()
        labels = cast("dict[str, Any]", context)
        try:
            while True:
                labels[SLOT_LABEL_KEY] = slot_label(self.slot, ran)
                answer = client.acquire_node(experiment_id, self.slot, self.rank, task_ref)
                if answer.status == SlotStatus.WAIT and answer.host is not None:
                    # Its node waits on another host: the master sent the task there.
                    self._defer(TrialNodeTrigger, ran, slot=self.slot, rank=self.rank, host=self._host_id)
                if answer.status != SlotStatus.RUN:
                    if ran:
                        return {"trials": sorted(set(ran))}
                    raise AirflowSkipException(f"no run of slot {self.slot} needs node {self.rank} now")
                trial_id, spec_dict, token = _trial_to_run(answer)
                run_id = int(spec_dict.get("run_id") or 0)
                try:
                    exit_code = self._run_trial(client, spec_dict, token)
                except Exception:
                    self._report_node_exit(client, trial_id, run_id, CRASHED)
                    raise
                self._report_node_exit(client, trial_id, run_id, exit_code)
                ran.append(trial_id)
        finally:
            client.close()

    def _report_node_exit(self, client: InternalClient, trial_id: int, run_id: int, code: int) -> None:
        """Tells the master how this node's process ended: a failure stops the gang at once."""
        self.log.info("Node %s of trial %s exited with code %s", self.rank, trial_id, code)
        try:
            client.exit_node(trial_id, self.rank, run_id, code)
        except APIError as exc:
            self.log.warning("Could not tell the master node %s ended: %s", self.rank, exc)

    def report_phase(self, client: InternalClient, trial_id: int, run_id: int, state: str, why: str) -> None:
        """The chief reports where the run's start is; a node's own start changes nothing of it."""
        self.log.info("Node %s of trial %s: %s (%s)", self.rank, trial_id, state, why)

    def _trial_dir(self, experiment_id: int, trial_id: int) -> Path:
        """Beside the chief's folder (on a work folder the hosts share, they never meet)."""
        return super()._trial_dir(experiment_id, trial_id).with_name(f"trial_{trial_id}.node{self.rank}")
