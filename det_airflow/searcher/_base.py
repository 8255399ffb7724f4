"""The event-driven protocol every search method follows, and the bookkeeping they share."""

from __future__ import annotations

import abc
import math
import random
from typing import Any, ClassVar

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._actions import Action, Create, ExitedReason, Shutdown
from det_airflow.searcher._errors import SearcherError
from det_airflow.searcher._samplers import HParamSampler, Outcome, make_sampler

_STATE_VERSION = 1


class SearchMethod(abc.ABC):
    """A search method: the master feeds it events and carries out the actions it returns.

    Like Determined's master, each event answers a list of actions:

    - :class:`Create`: start a trial with these hyperparameters.
    - :class:`Stop`: close a trial (a running one gets the preemption signal, checkpoints and
      exits; the master then sends ``trial_exited``).
    - :class:`Pause` / :class:`Resume` (promotion-based ASHA only): the trial reached its rung, must
      checkpoint and wait holding no slot / was promoted and goes on from its checkpoint.
    - :class:`Shutdown`: every trial is closed and none will be created.

    Events, in the order the master sees them: ``initial_trials()`` once; ``trial_created`` after
    each Create is carried out; ``validation_completed`` for every validation report (with all its
    metrics); ``trial_exited`` when a trial's process ends normally (not after a Pause: pausing is
    not exiting); ``trial_exited_early`` when it ends with invalid hyperparameters, a user's cancel
    or an error. The master answers a trial's searcher-operation request with
    :meth:`operation_length`.

    Request ids are sequential from 1; trial seeds and (with the default sampler) hyperparameters
    come from ``random.Random(experiment_seed)``, so the same seed gives the same trials.
    ``state_dict()`` is JSON-serializable; :func:`load_search_method` rebuilds a method that carries
    on exactly where the stored one stopped.

    Subclasses implement ``initial_trials``, ``trial_exited``, ``trial_exited_early`` and
    ``progress``, and extend ``state_dict`` / ``load_state_dict`` with their own fields.
    """

    #: The ``searcher.name`` this method implements; stored with its state.
    name: ClassVar[str]
    #: Whether the method decides on ``searcher.metric`` (adaptive search ranks trials by it).
    decides_on_metric: ClassVar[bool] = False

    def __init__(
        self, config: ExperimentConfig, *, optuna_storage: Any = None, study_name: str | None = None
    ) -> None:
        self.config = config
        # None means "from the clock": the master is expected to fix the seed at submission.
        self._rng = random.Random(config.experiment_seed)
        self._sampler: HParamSampler = make_sampler(
            config, optuna_storage=optuna_storage, study_name=study_name
        )
        self._next_request_id = 1
        self._open: set[int] = set()
        self._exits = 0
        self._failures = 0
        self._shut_down = False

    @classmethod
    @abc.abstractmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        """The most trials this search runs."""

    @classmethod
    def concurrent_trials(cls, config: ExperimentConfig) -> int:
        """The most trials this search runs at once (``max_concurrent_trials``, 0 = no limit)."""
        trials, limit = cls.trial_slots(config), config.searcher.max_concurrent_trials
        return min(trials, limit) if limit > 0 else trials

    @property
    def needs_metric(self) -> bool:
        """Whether every validation must carry ``searcher.metric``.

        As in Determined, only a search that decides on it does (adaptive search), and so does a
        sampler that learns from it (``searcher.sampler`` other than ``random``); single, grid and
        random search accept a validation without it, which then counts for no best validation.
        """
        return self.decides_on_metric or self._sampler.observes

    @property
    def sampler(self) -> HParamSampler:
        """Where new trials' hyperparameters come from (``searcher.sampler``)."""
        return self._sampler

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
        """A trial reported validation metrics after training ``steps_completed`` batches.

        A report without the searcher's metric changes nothing when the search does not need it
        (see :attr:`needs_metric`).

        Raises:
            SearcherError: The searcher's metric is not among ``metrics`` and the search needs it.
        """
        if self.config.searcher.metric not in metrics and not self.needs_metric:
            return []
        value = self._searcher_metric(metrics)
        if self._sampler.observes:
            self._sampler.report(request_id, self._number(value), steps_completed)
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

    def operation_length(self, request_id: int) -> int | None:
        """How far the trial should train now, in the unit of the searcher's length.

        The *seed*-era ``searcher.operations()`` length: promotion-based ASHA answers its current
        rung's (cumulative) units, stop-based ASHA the full length; None means ``max_length``
        (random, grid, single).
        """
        self._check_request_id(request_id)
        return None

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
            "sampler": self._sampler.state_dict(),
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
        self._sampler.load_state_dict(state.get("sampler", {}))

    # --- shared bookkeeping ----------------------------------------------------------------------

    def _create(self, hparams: dict[str, Any]) -> Create:
        """A Create for the next request id; draws the trial seed after the hyperparameters."""
        request_id = self._next_request_id
        self._next_request_id += 1
        self._open.add(request_id)
        return Create(request_id=request_id, trial_seed=self._rng.randint(0, 2**31 - 1), hparams=hparams)

    def _create_sampled(self) -> Create:
        """A Create with hyperparameters from the sampler."""
        return self._create(self._sampler.sample(self._next_request_id, self._rng))

    def _close(self, request_id: int, reason: ExitedReason | None = None) -> bool:
        """Marks a trial closed; False when it already was (a repeated exit event changes nothing).

        The sampler hears how it ended (a no-op when the method already told it).
        """
        if request_id not in self._open:
            self._check_request_id(request_id)
            return False
        self._open.remove(request_id)
        self._exits += 1
        if reason in (ExitedReason.ERRORED, ExitedReason.INVALID_HP):
            self._failures += 1
        self._sampler.finish(request_id, _OUTCOMES[reason])
        return True

    def _check_request_id(self, request_id: int) -> None:
        if request_id < 1 or request_id >= self._next_request_id:
            raise ValueError(f"no trial was created with request id {request_id}")

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

    def _number(self, value: Any) -> float:
        """A reported metric as a float; NaN counts as the worst value."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SearcherError(
                f"validation metric {self.config.searcher.metric!r} must be a number, got {value!r}"
            ) from None
        if math.isnan(number):
            return math.inf if self.config.searcher.smaller_is_better else -math.inf
        return number

    def _time_value(self, metrics: dict[str, Any], steps_completed: int) -> int:
        """How far a trial got when it reported, in the unit of the searcher's length.

        ``metrics[time_metric]`` with ``time_metric`` + ``max_time`` (0.38); with ``max_length``
        (*seed*) the batches trained, or ``metrics["records"]`` / ``metrics["epochs"]`` when the
        length is in records or epochs (the batches trained when the report has no such key).
        """
        searcher = self.config.searcher
        if searcher.time_metric is not None:
            if searcher.time_metric not in metrics:
                reported = ", ".join(sorted(metrics)) or "none"
                raise SearcherError(
                    f"time metric {searcher.time_metric!r} (searcher.time_metric) not found in the "
                    f"reported metrics ({reported})"
                )
            value = metrics[searcher.time_metric]
        elif searcher.max_length is not None and searcher.max_length.unit != "batches":
            value = metrics.get(searcher.max_length.unit, steps_completed)
        else:
            value = steps_completed
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            name = searcher.time_metric or (searcher.max_length.unit if searcher.max_length else "steps")
            raise SearcherError(f"time metric {name!r} must be a number, got {value!r}") from None


# How a trial's exit reads to the sampler (see HParamSampler.finish).
_OUTCOMES = {
    None: Outcome.COMPLETE,
    ExitedReason.USER_CANCELED: Outcome.PRUNED,
    ExitedReason.ERRORED: Outcome.FAILED,
    ExitedReason.INVALID_HP: Outcome.FAILED,
}
