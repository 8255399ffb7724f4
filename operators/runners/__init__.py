"""Where a trial runs: ``airflow.trial_runner`` (``[det] trial_runner``) picks a runner.

``local`` (the default) runs the trial as a process on the Airflow worker (the trial operator's own
body); ``docker`` runs it in a container (``_docker.DockerRunner``); ``kubernetes`` in a pod, or an
indexed Job for a gang (``_kubernetes.KubernetesRunner``, objects from
:mod:`det_airflow.operators.runners.kubernetes`).
"""

from det_airflow.operators.runners._base import (
    DEFAULT_IMAGES,
    LABEL_EXPERIMENT,
    LABEL_RUN,
    LABEL_TRIAL,
    RUNNERS,
    ContainerTrial,
    TrialRunner,
    container_environment,
    runner_name,
)
from det_airflow.operators.runners._run import build_runner, held_slots, run_with

__all__ = [
    "DEFAULT_IMAGES",
    "LABEL_EXPERIMENT",
    "LABEL_RUN",
    "LABEL_TRIAL",
    "RUNNERS",
    "ContainerTrial",
    "TrialRunner",
    "build_runner",
    "container_environment",
    "held_slots",
    "run_with",
    "runner_name",
]
