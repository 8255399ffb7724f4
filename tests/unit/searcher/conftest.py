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
    LogHP,
    SearcherConfig,
)
from det_airflow.searcher import Action, Create, ExitedReason, SearchMethod

# 2 * 2 * 2 * 2 * 1 = 16 grid points, with a nested group.
HPARAMS: dict[str, Any] = {
    "lr": LogHP(minval=-4, maxval=-1, count=2),
    "layers": IntHP(minval=1, maxval=4, count=2),
    "optimizer": {"name": CategoricalHP(("sgd", "adam")), "momentum": DoubleHP(0.8, 0.99, count=2)},
    "batch_size": ConstHP(32),
}

MakeConfig = Callable[..., ExperimentConfig]


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
