"""Where a trial runs: ``airflow.trial_runner`` (``[det] trial_runner``) picks a runner.

Every runner is a :class:`TrialRunner`, built by :func:`build_runner` from the experiment's config
and this worker's airflow.cfg ``[det]``:

- ``local`` (the default): a process on the Airflow worker (:mod:`.local`, ``LocalRunner``);
- ``docker``: a container of the worker's Docker daemon (:mod:`.docker`, ``DockerRunner``);
- ``kubernetes``: a pod, or an indexed Job for a gang (:mod:`.kubernetes`, ``KubernetesRunner``;
  the objects it submits are built in :mod:`.kubernetes_pod`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from det_airflow.errors import DetError
from det_airflow.operators.runners._base import OnContainer, OnPhase, TrialRunner, runner_name
from det_airflow.operators.runners._container import (
    CONTAINER_FAILED,
    DEFAULT_IMAGES,
    LABEL_EXPERIMENT,
    LABEL_RUN,
    LABEL_TRIAL,
    ContainerRunner,
    ContainerTrial,
    container_environment,
)
from det_airflow.operators.runners._launch import TrialLaunch, lease_slots


def _local() -> type[TrialRunner]:
    from det_airflow.operators.runners.local import LocalRunner

    return LocalRunner


def _docker() -> type[TrialRunner]:
    from det_airflow.operators.runners.docker import DockerRunner

    return DockerRunner


def _kubernetes() -> type[TrialRunner]:
    from det_airflow.operators.runners.kubernetes import KubernetesRunner

    return KubernetesRunner


# The runners by their `airflow.trial_runner` name; each module is imported when its runner is
# asked for (the docker and kubernetes clients are large).
RUNNERS: Mapping[str, Callable[[], type[TrialRunner]]] = {
    "local": _local,
    "docker": _docker,
    "kubernetes": _kubernetes,
}


def build_runner(
    name: str,
    config: Mapping[str, Any],
    *,
    log: Any = None,
    on_container: OnContainer | None = None,
    on_phase: OnPhase | None = None,
) -> TrialRunner:
    """The runner called ``name`` (``airflow.trial_runner``), set up from the experiment's config and
    this worker's ``airflow.cfg [det]``, which it checks each trial against before it starts."""
    from det_airflow import settings

    runner = RUNNERS.get(name)
    if runner is None:
        raise DetError(f"airflow.trial_runner: {name!r} cannot run trials on this worker yet")
    return runner().from_config(
        config, settings.load(), log=log, on_container=on_container, on_phase=on_phase
    )


__all__ = [
    "CONTAINER_FAILED",
    "DEFAULT_IMAGES",
    "LABEL_EXPERIMENT",
    "LABEL_RUN",
    "LABEL_TRIAL",
    "RUNNERS",
    "ContainerRunner",
    "ContainerTrial",
    "OnContainer",
    "OnPhase",
    "TrialLaunch",
    "TrialRunner",
    "build_runner",
    "container_environment",
    "lease_slots",
    "runner_name",
]
