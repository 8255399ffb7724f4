"""What the container runners (Docker, Kubernetes) share: the trial as a container sees it, its
labels and image, and the preparation of a run before its container starts."""

from __future__ import annotations

import abc
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_airflow.errors import DetError
from det_airflow.operators.runners._base import TrialRunner
from det_airflow.operators.runners._launch import TrialLaunch, lease_slots
from det_airflow.operators.runners._task_ready import OnTaskReady
from det_airflow.settings import Settings
from det_airflow.settings import load as load_settings
from det_airflow.slots import SlotLease
from det_airflow.trial_process import (
    STARTUP_HOOK,
    OnOutput,
    TrialSpec,
    entrypoint_argv,
    prepare_workdir,
    write_trial_files,
)

# Docker's own code for "the daemon could not run the container" (`docker run` exits with it too).
CONTAINER_FAILED = 125
# Labels on every container and pod of a trial, so that what a dead worker left can be found.
LABEL_PREFIX = "ai.det-airflow"
LABEL_EXPERIMENT = f"{LABEL_PREFIX}.experiment"
LABEL_TRIAL = f"{LABEL_PREFIX}.trial"
LABEL_RUN = f"{LABEL_PREFIX}.run"
# The image a trial runs in when `environment.image` does not name one (`make trial-image`).
DEFAULT_IMAGES = {
    "cpu": "det-airflow-trial:cpu",
    "cuda": "det-airflow-trial:cuda",
    "rocm": "det-airflow-trial:rocm",
}


@dataclass(frozen=True)
class ContainerTrial:
    """One run of a trial, ready to start in a container: its prepared work folder, command and
    environment.

    ``workdir`` is a host folder; containers see it at the same path, so every path in ``env``
    stays true inside. ``slot_ids`` are the slots the trial holds, of kind ``device``.
    """

    spec: TrialSpec
    workdir: Path
    argv: tuple[str, ...]
    env: Mapping[str, str]
    slot_ids: tuple[int, ...] = ()
    device: str = "cpu"
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    # A task's server, reported to the master once its port is found to be the task's own.
    on_task_ready: OnTaskReady | None = field(default=None, compare=False)

    @property
    def config(self) -> Mapping[str, Any]:
        return self.spec.config

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_EXPERIMENT: str(self.spec.experiment_id),
            LABEL_TRIAL: str(self.spec.trial_id),
            LABEL_RUN: str(self.spec.run_id),
            **self.extra_labels,
        }

    @property
    def name(self) -> str:
        return f"det-trial-{self.spec.experiment_id}-{self.spec.trial_id}-{self.spec.run_id}"

    def image(self) -> str:
        """``environment.image`` for this trial's device: a string, or ``{cpu, cuda, rocm}`` (``gpu`` is
        Determined's older name for ``cuda``); the trial image of ``make trial-image`` otherwise."""
        image = (self.config.get("environment") or {}).get("image")
        if isinstance(image, Mapping):
            chosen = image.get(self.device)
            if chosen is None and self.device == "cuda":
                chosen = image.get("gpu")
            image = chosen
        return str(image) if image else DEFAULT_IMAGES[self.device]

    def command(self) -> list[str]:
        """The entrypoint as the container runs it: ``python3`` for this interpreter (which the image
        does not have at the same path), ``startup-hook.sh`` sourced first when the context has one."""
        argv = ["python3" if arg == sys.executable else arg for arg in self.argv]
        if (self.workdir / STARTUP_HOOK).is_file():
            return ["sh", "-c", f'. ./{STARTUP_HOOK} && exec "$@"', "sh", *argv]
        return argv


#: A container trial's ``TMPDIR``: the container's own ``/tmp`` (a tmpfs under Docker's read-only
#: root, an ``emptyDir`` in a Kubernetes pod; else the image's), which no other trial shares. A
#: folder in the deep work folder leaves too little of an AF_UNIX socket path's 107 bytes for
#: programs that make their sockets under ``TMPDIR`` (Ray's session folder, NCCL).
CONTAINER_TMPDIR = Path("/tmp")


def container_environment(
    env: Mapping[str, str], config: Mapping[str, Any], device: str, slot_ids: Sequence[int], workdir: Path
) -> dict[str, str]:
    """A trial's environment as a container gets it: nothing of this host's own environment (the
    image brings PATH), ``environment_variables`` of the trial's device, and for GPUs the visible
    devices (the container sees the slots it holds numbered from 0)."""
    out = dict(env)
    variables = (config.get("environment") or {}).get("environment_variables") or {}
    by_device = variables if isinstance(variables, Mapping) else {"cpu": variables}
    for entry in by_device.get("cpu") or []:
        if device != "cpu":
            out.pop(str(entry).partition("=")[0], None)
    for entry in by_device.get(device) or (by_device.get("gpu") if device == "cuda" else None) or []:
        name, _, value = str(entry).partition("=")
        if not name.startswith("DET_"):  # the config may not pose as the master or another trial
            out[name] = value
    # The image's own PATH and Python; the work folder first on the import path.
    out["PYTHONPATH"] = str(workdir)
    out.pop("PATH", None)
    if device == "cuda" and slot_ids:
        out["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(slot_ids)))
    if device == "rocm" and slot_ids:
        out["ROCR_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(slot_ids)))
    return out


class ContainerRunner(TrialRunner):
    """A runner that starts a trial in containers: it prepares the work folder and slots on this
    worker, then runs the :class:`ContainerTrial` (:meth:`run`)."""

    settings: Settings | None = None  # this worker's airflow.cfg [det] (read when needed if not given)
    _log: Any = None

    @abc.abstractmethod
    def run(self, trial: ContainerTrial, *, on_output: OnOutput, stop: threading.Event) -> int:
        """Start the trial, pass its output lines to ``on_output(line, "stdout"|"stderr")``, stop it
        when ``stop`` is set, and answer its exit code once it is gone."""

    @abc.abstractmethod
    def sweep(self, trial_id: int) -> Sequence[object]:
        """Remove what an earlier run of ``trial_id`` left (a worker that died while its trial ran);
        answers what was removed."""

    def run_trial(self, launch: TrialLaunch, *, on_output: OnOutput, stop: threading.Event) -> int:
        prepared = self.prepare(launch, on_output=on_output)
        if prepared is None:
            return CONTAINER_FAILED
        trial, held = prepared
        try:
            code = self.run(trial, on_output=on_output, stop=stop)
        except DetError as exc:
            # The user's to fix (image, mounts): say so where they look, and count it as a failed run.
            on_output(f"ERROR: {exc}", "stderr")
            code = CONTAINER_FAILED
        finally:
            held.release()
        shutil.rmtree(trial.workdir, ignore_errors=True)
        return code

    def prepare(self, launch: TrialLaunch, *, on_output: OnOutput) -> tuple[ContainerTrial, SlotLease] | None:
        """The trial of ``launch`` ready for this runner: its work folder prepared and its slots held;
        None (the reason passed to ``on_output``) when its slots cannot be held."""
        spec, workdir = launch.spec, launch.workdir
        shutil.rmtree(workdir, ignore_errors=True)
        prepare_workdir(launch.fetch_context(), workdir)
        write_trial_files(spec, workdir)
        try:
            held = self.hold_slots(launch, (self.settings or load_settings()).slot_type)
        except DetError as exc:
            on_output(f"ERROR: {exc}", "stderr")
            return None
        slots, device = held.slot_ids, held.device
        env = launch.environment(slots, base_env={}, tmpdir=CONTAINER_TMPDIR)
        trial = ContainerTrial(
            spec=spec,
            workdir=workdir.absolute(),
            argv=tuple(entrypoint_argv(spec.config["entrypoint"])),
            env=container_environment(env, spec.config, device, slots, workdir.absolute()),
            slot_ids=slots,
            device=device,
            on_task_ready=launch.on_task_ready,
        )
        if self._log is not None:
            self._log.info(
                "Trial %s (experiment %s, run %s) starting on %s (%s, %s slots %s): %s",
                spec.trial_id,
                spec.experiment_id,
                spec.run_id,
                self.name,
                trial.image(),
                device,
                list(slots),
                " ".join(trial.command()),
            )
        return trial, held

    def hold_slots(self, launch: TrialLaunch, device: str) -> SlotLease:
        """The slots the trial holds, of kind ``device``: leased on this worker's host."""
        return lease_slots(launch, device)
