"""Grid search: one trial per grid point."""

from __future__ import annotations

from typing import Any

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._actions import Action, ExitedReason
from det_airflow.searcher._base import SearchMethod
from det_airflow.searcher._hparams import grid_points


class GridSearch(SearchMethod):
    """Runs one trial per point of :func:`grid_points`, in order, at most ``max_concurrent_trials``
    at a time (0: no limit).

    A point whose trial has invalid hyperparameters is not retried: that trial was the point.
    """

    name = "grid"

    def __init__(self, config: ExperimentConfig, **sampler_options: Any) -> None:
        super().__init__(config, **sampler_options)
        self._points = grid_points(config.hyperparameters)
        self._next_point = 0
        self._closed = 0

    @classmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        return len(grid_points(config.hyperparameters))

    def initial_trials(self) -> list[Action]:
        return self._fill()

    def trial_exited(self, request_id: int) -> list[Action]:
        return self._exit(request_id, None)

    def trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        return self._exit(request_id, reason)

    def progress(self) -> float:
        return self._closed / len(self._points)

    def state_dict(self) -> dict[str, Any]:
        # The points themselves follow from the config; only the position is state.
        return {**super().state_dict(), "next_point": self._next_point, "closed": self._closed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._next_point = state["next_point"]
        self._closed = state["closed"]

    def _exit(self, request_id: int, reason: ExitedReason | None) -> list[Action]:
        if self._close(request_id, reason):
            self._closed += 1
        return self._fill()

    def _fill(self) -> list[Action]:
        actions: list[Action] = []
        while self._next_point < len(self._points) and self._has_room():
            actions.append(self._create(self._points[self._next_point]))
            self._next_point += 1
        return actions + self._shutdown_if_done(self._next_point < len(self._points))
