"""ASHA search methods: one or more brackets behind the event protocol (``async_halving``)."""

from __future__ import annotations

import abc
from typing import Any

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._actions import Action, ExitedReason, Stop
from det_airflow.searcher._asha_bracket import CLOSED, RUNNING, AshaBracket
from det_airflow.searcher._asha_promotion import PromotionBracket
from det_airflow.searcher._asha_stopping import StoppingBracket
from det_airflow.searcher._base import SearchMethod
from det_airflow.searcher._brackets import Bracket, single_bracket
from det_airflow.searcher._errors import SearcherError
from det_airflow.searcher._rung import ordered, pack, unpack
from det_airflow.searcher._samplers import Outcome


class ASHASearch(SearchMethod):
    """Runs each bracket of :meth:`plan` as its own ASHA, as Determined's tournament search does.

    A trial belongs to the bracket that created it: each bracket starts as many trials as its
    concurrency allows, and creates one more (until its ``max_trials``) whenever one of its own
    trials is stopped, paused or ends, so brackets never take trials from one another.

    ``stop_once: true`` (the default, Determined 0.38) runs :class:`StoppingBracket` brackets;
    ``stop_once: false`` (the *seed* era) :class:`PromotionBracket` brackets, whose trials pause
    between rungs. The length is ``max_time`` (with ``time_metric``) or ``max_length``; a validation
    counts at ``metrics[time_metric]``, or the batches (records, epochs) trained for ``max_length``.
    """

    decides_on_metric = True

    def __init__(self, config: ExperimentConfig, **sampler_options: Any) -> None:
        super().__init__(config, **sampler_options)
        searcher = config.searcher
        length = self._length(config)
        if length is None:
            raise SearcherError(
                f"the {searcher.name} searcher needs a length: 'max_length' (e.g. {{batches: 937}}) "
                "or 'time_metric' with 'max_time'"
            )
        if length < 1:
            raise SearcherError(f"searcher.max_length: the {searcher.name} searcher needs a length >= 1")
        self.length = length
        kind = StoppingBracket if searcher.stop_once else PromotionBracket
        self.brackets: list[AshaBracket] = [
            kind(plan, length=length, divisor=searcher.divisor) for plan in self.plan(config, length)
        ]
        self._bracket_of: list[int] = []  # by request id - 1: the bracket that created the trial

    @classmethod
    @abc.abstractmethod
    def plan(cls, config: ExperimentConfig, length: int) -> list[Bracket]:
        """The brackets to run, in order."""

    @staticmethod
    def _length(config: ExperimentConfig) -> int | None:
        """What the rungs divide: ``max_time`` of ``time_metric``, else ``max_length``'s value."""
        searcher = config.searcher
        if searcher.max_time is not None:
            return searcher.max_time
        return searcher.max_length.value if searcher.max_length is not None else None

    @classmethod
    def concurrent_trials(cls, config: ExperimentConfig) -> int:
        """Each bracket's own concurrency, summed (with ``max_concurrent_trials`` 0 too)."""
        length = cls._length(config)
        if length is None or length < 1:
            return super().concurrent_trials(config)  # the search itself refuses the config
        brackets = cls.plan(config, length)
        return min(cls.trial_slots(config), sum(min(b.max_trials, b.max_concurrent_trials) for b in brackets))

    @classmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        assert config.searcher.max_trials is not None, "the config loader requires max_trials for ASHA"
        return config.searcher.max_trials

    # --- events ----------------------------------------------------------------------------------

    def initial_trials(self) -> list[Action]:
        actions: list[Action] = []
        for index in range(len(self.brackets)):
            actions += self._fill(index)
        return actions + self._shutdown_if_done(self._more_to_create())

    def validation_completed(
        self, request_id: int, metrics: dict[str, Any], steps_completed: int
    ) -> list[Action]:
        """Records the report in the trial's bracket.

        Raises:
            SearcherError: ``searcher.metric`` or ``searcher.time_metric`` is not in ``metrics``, or
                is not a number.
        """
        value = self._number(self._searcher_metric(metrics))
        time = self._time_value(metrics, steps_completed)
        index, bracket = self._bracket(request_id)
        if bracket.state(request_id) != RUNNING:
            return []  # stopped, paused or closed: nothing left to decide
        if self._sampler.observes:
            self._sampler.report(request_id, value, time)
        smaller = self.config.searcher.smaller_is_better
        return self._carry_out(
            index, bracket.record(request_id, time, ordered(value, smaller_is_better=smaller))
        )

    def trial_exited(self, request_id: int) -> list[Action]:
        index, bracket = self._bracket(request_id)
        if bracket.state(request_id) == RUNNING and not bracket.reached_top(request_id):
            # Ended on its own before the search was done with it.
            self._sampler.finish(request_id, Outcome.PRUNED)
        actions = bracket.exited(request_id)
        if bracket.state(request_id) == CLOSED:
            self._close(request_id)
        return self._carry_out(index, actions)

    def trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        index, bracket = self._bracket(request_id)
        actions = bracket.exited_early(request_id, reason)
        self._close(request_id, reason)
        return self._carry_out(index, actions)

    def operation_length(self, request_id: int) -> int | None:
        """The units to train to now: the full length (stop-based) or the current rung's (promotion)."""
        return self._bracket(request_id)[1].operation_length(request_id)

    def progress(self) -> float:
        completed = sum(bracket.completed() for bracket in self.brackets)
        return min(completed / self.trial_slots(self.config), 1.0)

    def rung_lengths(self) -> list[int]:
        """Every length at which some rung decides, ascending: where a trial should validate."""
        return sorted({units for bracket in self.brackets for units in bracket.units})

    # --- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "bracket_of": pack("h", self._bracket_of),
            "brackets": [bracket.state_dict() for bracket in self.brackets],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if len(state["brackets"]) != len(self.brackets):
            raise SearcherError(
                f"the stored searcher state has {len(state['brackets'])} brackets, the config "
                f"{len(self.brackets)}"
            )
        self._bracket_of = unpack("h", state["bracket_of"])
        for bracket, bracket_state in zip(self.brackets, state["brackets"], strict=True):
            bracket.load_state_dict(bracket_state)

    # --- helpers ---------------------------------------------------------------------------------

    def _bracket(self, request_id: int) -> tuple[int, AshaBracket]:
        self._check_request_id(request_id)
        index = self._bracket_of[request_id - 1]
        return index, self.brackets[index]

    def _carry_out(self, index: int, actions: list[Action]) -> list[Action]:
        """Tells the sampler about stopped trials, closes paused ones stopped (nothing to wait
        for), refills the bracket, and shuts down when every bracket is done."""
        bracket = self.brackets[index]
        for action in actions:
            if isinstance(action, Stop):
                done = bracket.reached_top(action.request_id)
                self._sampler.finish(action.request_id, Outcome.COMPLETE if done else Outcome.PRUNED)
                if bracket.state(action.request_id) == CLOSED:
                    self._close(action.request_id)
        actions = actions + self._fill(index)
        return actions + self._shutdown_if_done(self._more_to_create())

    def _fill(self, index: int) -> list[Action]:
        bracket = self.brackets[index]
        actions: list[Action] = []
        while bracket.wants_trial():
            create = self._create_sampled()
            bracket.add(create.request_id)
            self._bracket_of.append(index)
            actions.append(create)
        return actions

    def _more_to_create(self) -> bool:
        return any(bracket.more_to_create() for bracket in self.brackets)


class AsyncHalvingSearch(ASHASearch):
    """``async_halving``: one ASHA bracket of ``num_rungs`` rungs, ``max_trials`` trials.

    Runs ``min(max_concurrent_trials, max_trials)`` trials at a time (with 0: ``d**(num_rungs-1)``,
    enough for one to reach the top). See :class:`StoppingBracket` and :class:`PromotionBracket`.

    Example:
        >>> method = AsyncHalvingSearch(config)  # {name: async_halving, num_rungs: 3, max_trials: 8,
        ...                                      #  max_length: {batches: 937}, max_concurrent_trials: 2}
        >>> [a.request_id for a in method.initial_trials()]
        [1, 2]
        >>> method.validation_completed(1, {"loss": 0.5}, 58)  # the best at rung 58 goes on
        []
    """

    name = "async_halving"

    @classmethod
    def plan(cls, config: ExperimentConfig, length: int) -> list[Bracket]:
        searcher = config.searcher
        if searcher.num_rungs is None:
            raise SearcherError("searcher.num_rungs: the async_halving searcher needs num_rungs")
        return [
            single_bracket(
                num_rungs=searcher.num_rungs,
                max_trials=cls.trial_slots(config),
                divisor=searcher.divisor,
                max_concurrent_trials=searcher.max_concurrent_trials,
            )
        ]
