"""Trials as processes on the Airflow worker itself (``airflow.trial_runner: local``, the default).

The trial's process runs in its work folder on this host, holding the devices of the slots it
leased here, as an unprivileged user when the worker is root: the identity the master assigned to
the experiment's owner, or the admin's ``[det] trial_user`` (docs/trial-isolation.md).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_airflow.compat import determined_notice
from det_airflow.core._storage import FolderStorage
from det_airflow.core._tensorboard import prepare_tensorboard_root
from det_airflow.operators.runners._base import OnContainer, OnPhase, TrialRunner
from det_airflow.operators.runners._launch import TrialLaunch, lease_slots
from det_airflow.operators.runners._task_ready import session_leaders_of, watch_ready
from det_airflow.settings import Settings
from det_airflow.slots import SlotLease, SlotsUnavailable
from det_airflow.trial_process import (
    OnOutput,
    TrialIsolationError,
    TrialNetworkError,
    TrialSpec,
    TrialUser,
    check_can_write,
    check_trial_access,
    entrypoint_argv,
    hand_over,
    interpreter_paths,
    keep_off_host_services,
    make_passable_dirs,
    make_private_tmpdir,
    prepare_checkpoint_root,
    prepare_workdir,
    remove_private_tmpdir,
    run_trial_process,
    trial_user,
    write_trial_files,
)

# What a run answers when its process cannot be started as it must be (no user, no device).
NOT_STARTED = 126


class LocalRunner(TrialRunner):
    """Runs a trial as a process of this worker.

    Example::

        runner = LocalRunner(settings.load(), on_phase=report)
        code = runner.run_trial(launch, on_output=print_line, stop=threading.Event())
    """

    name = "local"

    def __init__(self, settings: Settings, *, log: Any = None, on_phase: OnPhase | None = None) -> None:
        self.settings = settings  # this worker's airflow.cfg [det]
        self._log = log
        # Told (trial state, why) once the process starts.
        self._on_phase = on_phase or (lambda state, why: None)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        settings: Settings,
        *,
        log: Any = None,
        on_container: OnContainer | None = None,
        on_phase: OnPhase | None = None,
    ) -> LocalRunner:
        """A local runner; a process has no container (``on_container`` is not called)."""
        return cls(settings, log=log, on_phase=on_phase)

    def run_trial(self, launch: TrialLaunch, *, on_output: OnOutput, stop: threading.Event) -> int:
        spec, workdir = launch.spec, launch.workdir
        shutil.rmtree(workdir, ignore_errors=True)
        on_output(determined_notice(), "stdout")
        try:
            user, tmpdir, slots = self._prepare(launch)
        except (TrialIsolationError, TrialNetworkError, SlotsUnavailable) as exc:
            # Into the trial's logs, where its owner looks, not only the Airflow task log.
            on_output(f"error: {exc}", "stderr")
            shutil.rmtree(workdir, ignore_errors=True)
            return NOT_STARTED
        env = launch.environment(slots.slot_ids, tmpdir=tmpdir)
        env.update(slots.visible_devices())  # the trial sees exactly the GPUs it leased
        argv = entrypoint_argv(spec.config["entrypoint"])
        runs_as = user.name if user is not None else "the worker's user"
        if self._log is not None:
            self._log.info(
                "Trial %s (experiment %s, run %s) starting in %s as %s: %s",
                spec.trial_id,
                spec.experiment_id,
                spec.run_id,
                workdir,
                runs_as,
                " ".join(argv),
            )
        self._on_phase("RUNNING", f"its process starts as {runs_as}")
        try:
            with watch_ready(
                launch.on_task_ready,
                workdir,
                uid=user.uid if user is not None else os.getuid(),
                leaders=lambda: session_leaders_of(os.getpid()),  # the trial's process leads a session
                on_output=on_output,
            ):
                code = run_trial_process(workdir, argv, env, on_output=on_output, stop=stop, user=user)
        finally:
            slots.release()
            remove_private_tmpdir(tmpdir)
        shutil.rmtree(workdir, ignore_errors=True)
        return code

    def _prepare(self, launch: TrialLaunch) -> tuple[TrialUser | None, Path, SlotLease]:
        """The trial's work folder and ``TMPDIR`` (docs/trial-isolation.md), given to the user it
        runs as, and its slots leased."""
        workdir = launch.workdir
        user = self._trial_user(launch.spec, workdir)
        if user is not None:
            keep_off_host_services(self.settings, user.uid, launch.master_url)
        prepare_workdir(launch.fetch_context(), workdir)
        write_trial_files(launch.spec, workdir)
        if user is not None:
            hand_over(workdir, user)
            check_trial_access(user, read=[workdir])
        tmpdir = make_private_tmpdir(user)
        try:
            return user, tmpdir, lease_slots(launch, self.settings.slot_type)
        except BaseException:
            remove_private_tmpdir(tmpdir)
            raise

    def _trial_user(self, spec: TrialSpec, workdir: Path) -> TrialUser | None:
        """The user the trial runs as (None: the worker's own): the uid the master assigned to the
        experiment's owner, unless the admin's ``[det] trial_user`` puts every user's trials under
        one identity. When it is another user, make sure it can run this Python, pass through to
        its work folder and write its checkpoints."""
        user = trial_user(self.settings.trial_user, uid=spec.uid, gid=spec.gid)
        if user is None:
            return None
        check_trial_access(user, read=interpreter_paths())
        make_passable_dirs(workdir.parent)
        storage = spec.config.get("checkpoint_storage")
        if storage and storage.get("type", "shared_fs") == "shared_fs":
            # Only the checkpoint root is the platform's to make; folders in it are the trial's.
            prepare_checkpoint_root(self.settings.checkpoint_root)
            prepare_tensorboard_root(self.settings.checkpoint_root)
            check_can_write(FolderStorage.from_config(storage).base, user)
        return user
