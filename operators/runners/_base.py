"""What every trial runner shares: the trial as a runner sees it, and the choice of runner."""

from __future__ import annotations

import abc
import codecs
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_airflow.trial_process import STARTUP_HOOK, TrialSpec

RUNNERS = ("local", "docker", "kubernetes")
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
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

OnOutput = Callable[[str, str], None]


def runner_name(config: Mapping[str, Any]) -> str:
    """Where a trial runs: the experiment's ``airflow.trial_runner`` (defaults from ``[det]`` are
    filled in when the config is parsed), else local."""
    section = config.get("airflow") or {}
    name = section.get("trial_runner") or section.get("executor") or "local"
    return str(name)


@dataclass(frozen=True)
class ContainerTrial:
    """One run of a trial, ready to start: its prepared work folder, command and environment.

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


class TrialRunner(abc.ABC):
    """Runs one prepared trial somewhere and answers its exit code (0 = done or preempted cleanly)."""

    name: str

    @abc.abstractmethod
    def run(self, trial: ContainerTrial, *, on_output: OnOutput, stop: threading.Event) -> int:
        """Start the trial, pass its output lines to ``on_output(line, "stdout"|"stderr")``, stop it
        when ``stop`` is set, and answer its exit code once it is gone."""


class LineSplitter:
    """Turns chunks of bytes into lines; ``\\r\\n``, ``\\r`` and ``\\n`` all end one (progress bars)."""

    def __init__(self, stream: str, emit: OnOutput) -> None:
        self.stream = stream
        self._emit = emit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, chunk: bytes) -> None:
        self._pending += self._decoder.decode(chunk)
        # A trailing \r may be the first half of \r\n: keep it until more arrives.
        cut = len(self._pending) - 1 if self._pending.endswith("\r") else len(self._pending)
        parts = _LINE_BREAK.split(self._pending[:cut])
        breaks = _LINE_BREAK.findall(self._pending[:cut])
        for text, brk in zip(parts, breaks, strict=False):
            if text or brk != "\r":
                self._emit(text, self.stream)
        self._pending = parts[-1] + self._pending[cut:]

    def close(self) -> None:
        self._pending += self._decoder.decode(b"", final=True)
        if self._pending.rstrip("\r"):
            self._emit(self._pending.rstrip("\r"), self.stream)
        self._pending = ""
