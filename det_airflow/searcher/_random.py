"""Random search: ``max_trials`` trials with sampled hyperparameters."""

from __future__ import annotations

from typing import Any

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._actions import Action, ExitedReason
from det_airflow.searcher._base import SearchMethod


class RandomSearch(SearchMethod):
    """Runs ``max_trials`` trials, at most ``max_concurrent_trials`` at a time (0: no limit).

    Starts as many as the limit allows and one more whenever a trial exits. A trial with invalid
    hyperparameters is replaced: it does not count toward ``max_trials``. Hyperparameters come
    from ``searcher.sampler`` (independent random draws by default; see :mod:`._samplers`).

    Example:
        >>> method = RandomSearch(config)  # searcher: {name: random, max_trials: 3, max_concurrent_trials: 2}
        >>> [a.request_id for a in method.initial_trials()]
        [1, 2]
        >>> method.trial_exited(1)
        [Create(request_id=3, ...)]
    """

    name = "random"

    def __init__(self, config: ExperimentConfig, **sampler_options: Any) -> None:
        super().__init__(config, **sampler_options)
        self._created = 0  # trials that count toward max_trials
        self._completed = 0  # closed trials that count toward max_trials

    @classmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        return cls._max_trials(config)

    @staticmethod
    def _max_trials(config: ExperimentConfig) -> int:
        assert config.searcher.max_trials is not None, "the config loader requires max_trials for random"
        return config.searcher.max_trials

    def initial_trials(self) -> list[Action]:
        return self._fill()

    def trial_exited(self, request_id: int) -> list[Action]:
        if self._close(request_id):
            self._completed += 1
        return self._fill()

    def trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        if self._close(request_id, reason):
            if reason is ExitedReason.INVALID_HP:
                self._created -= 1
            else:
                self._completed += 1
        return self._fill()

    def progress(self) -> float:
        return min(self._completed / self._max_trials(self.config), 1.0)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "created": self._created, "completed": self._completed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._created = state["created"]
        self._completed = state["completed"]

    def _fill(self) -> list[Action]:
        max_trials = self._max_trials(self.config)
        actions: list[Action] = []
        while self._created < max_trials and self._has_room():
            self._created += 1
            actions.append(self._create_sampled())
        return actions + self._shutdown_if_done(self._created < max_trials)
