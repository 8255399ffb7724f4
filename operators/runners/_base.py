"""The one interface every trial runner has, and the choice of runner by ``airflow.trial_runner``."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from det_airflow.operators.runners._launch import TrialLaunch
from det_airflow.settings import Settings
from det_airflow.trial_process import OnOutput

# Told (trial state, why) as a run goes PULLING its image, STARTING, RUNNING.
OnPhase = Callable[[str, str], None]
# Told the id of each container (or name of each pod) once it exists.
OnContainer = Callable[[str], None]


def runner_name(config: Mapping[str, Any]) -> str:
    """Where a trial runs: the experiment's ``airflow.trial_runner`` (defaults from ``[det]`` are
    filled in when the config is parsed), else local."""
    section = config.get("airflow") or {}
    name = section.get("trial_runner") or section.get("executor") or "local"
    return str(name)


class TrialRunner(abc.ABC):
    """Runs one trial somewhere (a process on this worker, a Docker container, Kubernetes pods) and
    answers its exit code (0 = done or preempted cleanly).

    Example::

        runner = build_runner("docker", spec.config, on_phase=report)
        code = runner.run_trial(launch, on_output=print_line, stop=threading.Event())
    """

    name: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        settings: Settings,
        *,
        log: Any = None,
        on_container: OnContainer | None = None,
        on_phase: OnPhase | None = None,
    ) -> TrialRunner:
        """The runner for a trial of the experiment ``config`` on this worker (``settings``: its
        airflow.cfg ``[det]``), reporting to the callbacks given."""

    @abc.abstractmethod
    def run_trial(self, launch: TrialLaunch, *, on_output: OnOutput, stop: threading.Event) -> int:
        """Prepare the trial's work folder and slots, start it, pass its output lines to
        ``on_output(line, "stdout"|"stderr")``, stop it when ``stop`` is set, and answer its exit
        code once it is gone and its files are cleaned up. A trial that cannot start answers a
        failure code, the reason passed to ``on_output``."""
