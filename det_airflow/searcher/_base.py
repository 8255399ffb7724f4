"""The event-driven protocol every search method follows, and the bookkeeping they share."""

from __future__ import annotations

import abc
import random
from typing import Any, ClassVar

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._actions import Action, Create, ExitedReason, Shutdown
from det_airflow.searcher._errors import SearcherError

_STATE_VERSION = 1


class SearchMethod(abc.ABC):
    """A search method: the master feeds it events and carries out the actions it returns.

    Like Determined's master, each event answers a list of :class:`Create`, :class:`Stop` and
    :class:`Shutdown` actions. Request ids are sequential from 1; trial seeds and sampled
    hyperparameters come from ``random.Random(experiment_seed)``, so the same seed gives the same
    trials. ``state_dict()`` is JSON-serializable; :func:`load_search_method` rebuilds a method
    that carries on exactly where the stored one stopped.

    Subclasses implement ``initial_trials``, ``trial_exited``, ``trial_exited_early`` and
    ``progress``, and extend ``state_dict`` / ``load_state_dict`` with their own fields.
    """

    #: The ``searcher.name`` this method implements; stored with its state.
    name: ClassVar[str]

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        # None means "from the clock": the master is expected to fix the seed at submission.
        self._rng = random.Random(config.experiment_seed)
        self._next_request_id = 1
        self._open: set[int] = set()
        self._exits = 0
        self._failures = 0
        self._shut_down = False

    @classmethod
    @abc.abstractmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        """The most trials this search runs: the number of trial slots the DAG maps."""

    # --- events ----------------------------------------------------------------------------------

    @abc.abstractmethod
    def initial_trials(self) -> list[Action]:
        """The actions that start the search."""

    def trial_created(self, request_id: int) -> list[Action]:
        """The master has created the trial asked for by ``Create(request_id)``."""
        return []

    def validation_completed(
        self, request_id: int, metrics: dict[str, Any], steps_completed: int
    ) -> list[Action]:
        """A trial reported validation metrics.

        Raises:
            SearcherError: The searcher's metric is not among ``metrics``.
        """
        self._searcher_metric(metrics)
        return []

    @abc.abstractmethod
    def trial_exited(self, request_id: int) -> list[Action]:
        """A trial finished normally."""

    @abc.abstractmethod
    def trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        """A trial ended before finishing: invalid hyperparameters, canceled by a user, or errored."""

    @abc.abstractmethod
    def progress(self) -> float:
        """How far the search is, from 0 to 1."""

    # --- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The method's state, JSON-serializable; subclasses add their own keys."""
        version, internal, gauss_next = self._rng.getstate()
        return {
            "version": _STATE_VERSION,
            "method": self.name,
            "rng": [version, list(internal), gauss_next],
            "next_request_id": self._next_request_id,
            "open": sorted(self._open),
            "exits": self._exits,
            "failures": self._failures,
            "shut_down": self._shut_down,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (after a JSON round trip).

        Raises:
            SearcherError: The state belongs to another search method or format version.
        """
        if state.get("method") != self.name or state.get("version") != _STATE_VERSION:
            raise SearcherError(
                f"the stored searcher state (method {state.get('method')!r}, version {state.get('version')!r}) "
                f"does not fit searcher {self.name!r} (version {_STATE_VERSION})"
            )
        version, internal, gauss_next = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss_next))
        self._next_request_id = state["next_request_id"]
        self._open = set(state["open"])
        self._exits = state["exits"]
        self._failures = state["failures"]
        self._shut_down = state["shut_down"]

    # --- shared bookkeeping ----------------------------------------------------------------------

    def _create(self, hparams: dict[str, Any]) -> Create:
        """A Create for the next request id; draws the trial seed after the hyperparameters."""
        request_id = self._next_request_id
        self._next_request_id += 1
        self._open.add(request_id)
        return Create(request_id=request_id, trial_seed=self._rng.randint(0, 2**31 - 1), hparams=hparams)

    def _close(self, request_id: int, reason: ExitedReason | None = None) -> bool:
        """Marks a trial closed; False when it already was (a repeated exit event changes nothing)."""
        if request_id not in self._open:
            if request_id < 1 or request_id >= self._next_request_id:
                raise ValueError(f"no trial was created with request id {request_id}")
            return False
        self._open.remove(request_id)
        self._exits += 1
        if reason in (ExitedReason.ERRORED, ExitedReason.INVALID_HP):
            self._failures += 1
        return True

    def _has_room(self) -> bool:
        """Whether ``max_concurrent_trials`` allows one more open trial (0 means no limit)."""
        limit = self.config.searcher.max_concurrent_trials
        return limit == 0 or len(self._open) < limit

    def _shutdown_if_done(self, more_to_create: bool) -> list[Action]:
        """``[Shutdown]`` once, when every trial is closed and no more will be created.

        ``failure`` is set when every trial failed (errored or had invalid hyperparameters).
        """
        if self._open or more_to_create or self._shut_down:
            return []
        self._shut_down = True
        return [Shutdown(failure=self._exits > 0 and self._failures == self._exits)]

    def _searcher_metric(self, metrics: dict[str, Any]) -> Any:
        """The value of ``searcher.metric`` in a validation report."""
        metric = self.config.searcher.metric
        if metric not in metrics:
            reported = ", ".join(sorted(metrics)) or "none"
            raise SearcherError(
                f"validation metric {metric!r} not found in the reported metrics ({reported})"
            )
        return metrics[metric]
