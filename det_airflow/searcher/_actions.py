"""What a search method asks the master to do, and why a trial may end early."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Create:
    """Start a new trial.

    Attributes:
        request_id: The trial's id within the search, sequential from 1.
        trial_seed: Seed for the trial's own randomness, in ``0 .. 2**31 - 1``.
        hparams: The trial's hyperparameters; nested groups are nested dicts.
    """

    request_id: int
    trial_seed: int
    hparams: dict[str, Any]


@dataclass(frozen=True)
class Stop:
    """Close a trial: the search needs nothing more from it.

    A running trial gets the preemption signal, checkpoints and exits cleanly; the master then
    sends ``trial_exited``. A paused trial (see :class:`Pause`) has no process to signal: the
    search method closes it itself, and a later ``trial_exited`` for it changes nothing.
    """

    request_id: int


@dataclass(frozen=True)
class Pause:
    """The trial reached the units of its rung and waits for the rest of its rung.

    Promotion-based ASHA (``stop_once: false``) only. The trial gets the preemption signal,
    checkpoints and exits holding no slot. That exit is part of pausing: the master keeps the trial
    open (paused) and does not send ``trial_exited`` for it. It is later either resumed
    (:class:`Resume`) or closed (:class:`Stop`).
    """

    request_id: int


@dataclass(frozen=True)
class Resume:
    """A paused trial was promoted: relaunch it from its latest checkpoint.

    It trains on to its new ``operation_length`` (the next rung's units).
    """

    request_id: int


@dataclass(frozen=True)
class Shutdown:
    """The search is over: every created trial is closed and no more will be created.

    Attributes:
        cancel: The search was canceled.
        failure: Every trial failed, so the experiment ends in ERROR.
    """

    cancel: bool = False
    failure: bool = False


Action = Create | Stop | Pause | Resume | Shutdown


class ExitedReason(enum.StrEnum):
    """Why a trial ended before the search method closed it."""

    INVALID_HP = "INVALID_HP"
    USER_CANCELED = "USER_CANCELED"
    ERRORED = "ERRORED"
