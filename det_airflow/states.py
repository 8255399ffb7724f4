"""Experiment and trial states, named as Determined names them."""

from __future__ import annotations

import enum


class ExperimentState(enum.StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    DELETING = "DELETING"
    DELETED = "DELETED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_EXPERIMENT_STATES


TERMINAL_EXPERIMENT_STATES = frozenset(
    {ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.ERROR, ExperimentState.DELETED}
)


class TrialState(enum.StrEnum):
    QUEUED = "QUEUED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_TRIAL_STATES


TERMINAL_TRIAL_STATES = frozenset({TrialState.COMPLETED, TrialState.CANCELED, TrialState.ERROR})


# Log levels from least to most severe, as `det trial logs --level` and the logs route filter them.
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
