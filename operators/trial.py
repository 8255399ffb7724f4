"""Trial operators: one mapped task instance per trial slot (see docs/master-api.md, slot protocol)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context

from det_airflow.api.internal import InternalClient
from det_airflow.errors import APIError
from det_airflow.operators._logs import LogShipper
from det_airflow.operators._master import master_credentials
from det_airflow.operators.triggers import TrialSlotTrigger
from det_airflow.states import ExperimentState, TrialState

if TYPE_CHECKING:
    from det_airflow.trial_process import TrialSpec, TrialUser


def default_work_dir() -> Path:
    import os

    from airflow.configuration import conf

    configured = conf.get("det", "trial_work_dir", fallback=None)
    home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
    return Path(configured or os.path.join(home, "det-trials")).expanduser()


class TrialOperator(BaseOperator):
    """Runs the trials of one trial slot: asks the master for a trial, waits (deferred) while there is
    none yet, runs it, and reports how it ended. A failed run raises, so Airflow's retries
    (`max_restarts`) start it again from its latest checkpoint.

    Subclasses say where the trial's process runs (`_run_trial`); this one runs it as a local process.
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

    # --- Airflow entry points ---

    def execute(self, context: Context) -> dict[str, Any] | None:
        return self._serve_slot(context, ran=[])

    def resume(
        self, context: Context, event: dict[str, Any], ran: list[int] | None = None
    ) -> dict[str, Any] | None:
        if event.get("status") == "error":
            raise RuntimeError(event["message"])
        return self._serve_slot(context, ran=list(ran or []))

    def on_kill(self) -> None:
        self._stop.set()

    @cached_property
    def _credentials(self) -> tuple[str, str]:
        """(master URL, service token), read once: each connection lookup is a round trip."""
        return master_credentials(self.master_conn_id)

    def _client(self) -> InternalClient:
        return InternalClient(*self._credentials)

    # --- the slot loop ---

    def _serve_slot(self, context: Context, ran: list[int]) -> dict[str, Any] | None:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

        experiment_id = int(self.experiment_id)
        ti = context["ti"]
        task_ref = {
            "try_number": ti.try_number,
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "map_index": ti.map_index,
        }
        client = self._client()
        try:
            while True:
                answer = client.acquire(experiment_id, self.slot, task_ref)
                if answer["status"] == "done":
                    if ran:
                        return {"trials": ran}
                    raise AirflowSkipException(f"the search needs no trial in slot {self.slot}")
                if answer["status"] == "wait":
                    self._defer(TrialSlotTrigger, ran, slot=self.slot)
                trial_id = answer["trial"]["id"]
                exit_code = self._run_trial(client, answer["spec"], answer["token"])
                result = client.exit_trial(
                    trial_id, exit_code, try_number=ti.try_number, max_tries=getattr(ti, "max_tries", 0)
                )
                state = TrialState(result["trial"]["state"])
                if result["retry"]:
                    raise AirflowException(
                        f"trial {trial_id} exited with code {exit_code}; it restarts from its latest checkpoint "
                        f"(restart {result['trial']['restarts']})"
                    )
                if state == TrialState.ERROR:
                    raise AirflowFailException(
                        f"trial {trial_id} failed (exit code {exit_code}) after its last restart"
                    )
                if state == TrialState.PAUSED:
                    self.log.info(
                        "Trial %s paused; this slot waits (holding no pool slot) to resume it", trial_id
                    )
                    self._defer(TrialSlotTrigger, ran, slot=self.slot)
                self.log.info("Trial %s ended %s", trial_id, state)
                ran.append(trial_id)
                if result["trial"]["early_exit"] != "INVALID_HP":
                    return {"trials": ran}
                # The search replaces a trial with invalid hyperparameters: this slot runs the replacement.
        finally:
            client.close()

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

    def _run_trial(self, client: InternalClient, spec_dict: dict[str, Any], token: str) -> int:
        from det_airflow.operators.runners import run_with, runner_name

        where = runner_name(spec_dict.get("config") or {})
        if where != "local":
            return run_with(where, self, client, spec_dict, token)
        from det_airflow.trial_process import (
            TrialIsolationError,
            TrialSpec,
            check_trial_access,
            entrypoint_argv,
            hand_over,
            prepare_workdir,
            run_trial_process,
            trial_environment,
            write_trial_files,
        )

        spec = TrialSpec.from_dict(spec_dict)
        master, _ = self._credentials
        workdir = (
            Path(self.work_dir or default_work_dir()) / f"exp_{spec.experiment_id}" / f"trial_{spec.trial_id}"
        )
        shutil.rmtree(workdir, ignore_errors=True)
        shipper = LogShipper(self._client(), spec.trial_id, log=self.log)
        from det_airflow.compat import determined_notice

        self.log.info("%s", determined_notice())
        shipper.add(determined_notice(), "stdout")

        def on_output(line: str, stream: str) -> None:
            self.log.info("%s", line)
            shipper.add(line, stream)

        try:
            user = self._trial_user(spec, workdir)
            prepare_workdir(client.context(spec.experiment_id), workdir)
            write_trial_files(spec, workdir)
            if user is not None:
                hand_over(workdir, user)
                check_trial_access(user, read=[workdir])
        except TrialIsolationError as exc:
            # Into the trial's logs, where its owner looks, not only the Airflow task log.
            on_output(f"error: {exc}", "stderr")
            shipper.close()
            shipper.client.close()
            shutil.rmtree(workdir, ignore_errors=True)
            return 126
        env = trial_environment(spec, master_url=master, token=token, workdir=workdir)
        argv = entrypoint_argv(spec.config["entrypoint"])
        self.log.info(
            "Trial %s (experiment %s, run %s) starting in %s as %s: %s",
            spec.trial_id,
            spec.experiment_id,
            spec.run_id,
            workdir,
            user.name if user is not None else "the worker's user",
            " ".join(argv),
        )
        self._stop.clear()
        watcher = threading.Thread(target=self._watch, args=(spec.trial_id,), daemon=True)
        watcher.start()
        try:
            code = run_trial_process(workdir, argv, env, on_output=on_output, stop=self._stop, user=user)
        finally:
            self._stop.set()
            shipper.close()
            shipper.client.close()
        self.log.info("Trial %s exited with code %s", spec.trial_id, code)
        shutil.rmtree(workdir, ignore_errors=True)
        return code

    def _trial_user(self, spec: TrialSpec, workdir: Path) -> TrialUser | None:
        """The user the trial runs as (None: the worker's own). When it is another user, make sure
        it can run this Python, pass through to its work folder and write its checkpoints."""
        from airflow.configuration import conf

        from det_airflow.core._storage import CheckpointStorage
        from det_airflow.master.experiments import default_checkpoint_storage
        from det_airflow.trial_process import (
            check_trial_access,
            ensure_writable_dir,
            interpreter_paths,
            make_passable_dirs,
            trial_user,
        )

        user = trial_user(conf.get("det", "trial_user", fallback=None) or None)
        if user is None:
            return None
        check_trial_access(user, read=interpreter_paths())
        make_passable_dirs(workdir.parent)
        storage = spec.config.get("checkpoint_storage")
        if storage and storage.get("type", "shared_fs") == "shared_fs":
            path = CheckpointStorage.from_config(storage).base
            default = Path(default_checkpoint_storage()["host_path"])
            ensure_writable_dir(path, user, adopt=path == default)
        return user

    def _watch(self, trial_id: int) -> None:
        """Kill the trial's process when its experiment is killed, or when it ignores a preemption."""
        client = self._client()
        asked_at: float | None = None
        try:
            while not self._stop.wait(5.0):
                try:
                    status = client.trial_status(trial_id)
                except APIError:
                    continue
                exp_state = ExperimentState(status["experiment_state"])
                if (
                    exp_state == ExperimentState.STOPPING_KILLED
                    or status["trial"]["state"] == TrialState.STOPPING_KILLED
                ):
                    self.log.warning("Experiment or trial killed: stopping trial %s now", trial_id)
                    self._stop.set()
                    return
                preempting = exp_state != ExperimentState.ACTIVE or status["trial"].get("stop_requested")
                if not preempting:
                    asked_at = None
                    continue
                asked_at = asked_at or time.monotonic()
                if time.monotonic() - asked_at > self.preemption_timeout:
                    self.log.warning(
                        "Trial %s ignored preemption for %ss: stopping it", trial_id, self.preemption_timeout
                    )
                    self._stop.set()
                    return
        finally:
            client.close()
