"""Configs and a tiny stand-in master for driving search methods through their events."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from det_airflow.config._types import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    IntHP,
    Length,
    LogHP,
    SearcherConfig,
)
from det_airflow.searcher import Action, Create, ExitedReason, Pause, Resume, SearchMethod, Stop

# 2 * 2 * 2 * 2 * 1 = 16 grid points, with a nested group.
HPARAMS: dict[str, Any] = {
    "lr": LogHP(minval=-4, maxval=-1, count=2),
    "layers": IntHP(minval=1, maxval=4, count=2),
    "optimizer": {"name": CategoricalHP(("sgd", "adam")), "momentum": DoubleHP(0.8, 0.99, count=2)},
    "batch_size": ConstHP(32),
}

MakeConfig = Callable[..., ExperimentConfig]

# The ASHA search the tests start from: 4 trials, 2 at once, halving, 100 batches.
ASHA_FIELDS: dict[str, Any] = {
    "max_trials": 4,
    "max_concurrent_trials": 2,
    "divisor": 2,
    "max_length": Length("batches", 100),
}


def asha_config(make_config: MakeConfig, num_rungs: int, **fields: Any) -> ExperimentConfig:
    """An ``async_halving`` config of ``ASHA_FIELDS`` with ``num_rungs`` rungs, ``fields`` on top."""
    return make_config("async_halving", **(ASHA_FIELDS | {"num_rungs": num_rungs} | fields))


@pytest.fixture
def make_config() -> MakeConfig:
    """``make_config(name, hyperparameters=HPARAMS, seed=7, **searcher_fields)``."""

    def make(
        name: str = "random",
        hyperparameters: dict[str, Any] | None = None,
        *,
        seed: int | None = 7,
        metric: str = "validation_loss",
        **searcher: Any,
    ) -> ExperimentConfig:
        return ExperimentConfig(
            entrypoint="python3 train.py",
            searcher=SearcherConfig(name=name, metric=metric, **searcher),  # type: ignore[arg-type]
            hyperparameters=HPARAMS if hyperparameters is None else hyperparameters,
            experiment_seed=seed,
        )

    return make


class FakeMaster:
    """Plays the master: starts every Create at once, then exits the oldest open trial per step.

    ``early`` maps request ids to the reason they exit early; the others exit normally.
    """

    def __init__(self, method: SearchMethod, early: dict[int, ExitedReason] | None = None) -> None:
        self.method = method
        self.early = early or {}
        self.actions: list[Action] = []
        self.open: deque[int] = deque()

    def start(self) -> FakeMaster:
        self._handle(self.method.initial_trials())
        return self

    def step(self) -> list[Action]:
        request_id = self.open.popleft()
        before = len(self.actions)
        self._handle(
            self.method.validation_completed(request_id, {"validation_loss": 0.5, "accuracy": 0.9}, 100)
        )
        if request_id in self.early:
            self._handle(self.method.trial_exited_early(request_id, self.early[request_id]))
        else:
            self._handle(self.method.trial_exited(request_id))
        return self.actions[before:]

    def run(self, steps: int | None = None) -> FakeMaster:
        while self.open and steps != 0:
            self.step()
            steps = None if steps is None else steps - 1
        return self

    @property
    def creates(self) -> list[Create]:
        return [a for a in self.actions if isinstance(a, Create)]

    def _handle(self, actions: list[Action]) -> None:
        self.actions += actions
        for action in actions:
            if isinstance(action, Create):
                self.open.append(action.request_id)
                self._handle(self.method.trial_created(action.request_id))


def said(actions: list[Action]) -> list[Any]:
    """Actions as ``("Stop", 2)`` pairs (``"Shutdown"`` alone): what was decided, for whom."""
    return [
        (type(a).__name__, a.request_id) if hasattr(a, "request_id") else type(a).__name__ for a in actions
    ]


def validation_loss(value: float) -> dict[str, float]:
    """A validation report of ``searcher.metric`` (``validation_loss``) alone."""
    return {"validation_loss": value}


def loss(request_id: int, units: int) -> float:
    """A made-up validation loss: each trial has its own level, and it falls with training."""
    return ((request_id * 7919) % 101) / 101 + 1 / (1 + units)


class RungMaster:
    """Plays the master for ASHA: trains the oldest running trial to its next validation length.

    Each step validates one trial at the next of ``points`` (or its ``operation_length``), with
    ``values(request_id, units)``; a trial in ``early`` exits early instead of its first report.
    A Stop ends a running trial at once (``trial_exited``); Pause and Resume move it out of and
    back into the queue.
    """

    def __init__(
        self,
        method: SearchMethod,
        points: list[int],
        *,
        values: Callable[[int, int], float] = loss,
        early: dict[int, ExitedReason] | None = None,
    ) -> None:
        self.method = method
        self.points = sorted(points)
        self.values = values
        self.early = early or {}
        self.actions: list[Action] = []
        self.running: deque[int] = deque()
        self.paused: set[int] = set()
        self.trained: dict[int, int] = {}
        self.done: set[int] = set()

    def start(self) -> RungMaster:
        self._handle(self.method.initial_trials())
        return self

    def step(self) -> None:
        request_id = self.running.popleft()
        if request_id in self.early:
            self.done.add(request_id)
            self._handle(self.method.trial_exited_early(request_id, self.early.pop(request_id)))
            return
        target = self.method.operation_length(request_id) or self.points[-1]
        units = min([p for p in self.points if p > self.trained[request_id]] + [target])
        self.trained[request_id] = units
        metrics = {"validation_loss": self.values(request_id, units)}
        self._handle(self.method.validation_completed(request_id, metrics, units))
        if request_id in self.done or request_id in self.paused:
            return
        if units >= (self.method.operation_length(request_id) or self.points[-1]):
            self.done.add(request_id)
            self._handle(self.method.trial_exited(request_id))
        else:
            self.running.append(request_id)

    def run(self, steps: int | None = None) -> RungMaster:
        while self.running and steps != 0:
            self.step()
            steps = None if steps is None else steps - 1
        return self

    @property
    def creates(self) -> list[Create]:
        return [a for a in self.actions if isinstance(a, Create)]

    def _handle(self, actions: list[Action]) -> None:
        self.actions += actions
        for action in actions:
            if isinstance(action, Create):
                self.running.append(action.request_id)
                self.trained[action.request_id] = 0
                self._handle(self.method.trial_created(action.request_id))
            elif isinstance(action, Stop) and action.request_id not in self.done:
                self.done.add(action.request_id)
                if action.request_id in self.running:
                    self.running.remove(action.request_id)
                if action.request_id in self.paused:
                    self.paused.discard(action.request_id)  # closed by the method itself
                else:
                    self._handle(self.method.trial_exited(action.request_id))
            elif isinstance(action, Pause):
                self.paused.add(action.request_id)
            elif isinstance(action, Resume):
                self.paused.discard(action.request_id)
                self.running.append(action.request_id)
