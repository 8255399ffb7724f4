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
    """Stop a running trial: it checkpoints and exits cleanly."""

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


Action = Create | Stop | Shutdown


class ExitedReason(enum.StrEnum):
    """Why a trial ended before the search method closed it."""

    INVALID_HP = "INVALID_HP"
    USER_CANCELED = "USER_CANCELED"
    ERRORED = "ERRORED"
