"""Stop-based ASHA (Determined 0.38, ``stop_once: true``): trials train to the full length unless
a rung stops them."""

from __future__ import annotations

from det_airflow.searcher._actions import Action, ExitedReason
from det_airflow.searcher._asha_bracket import CLOSED, RUNNING, STOPPING, AshaBracket
from det_airflow.searcher._brackets import Bracket, rung_units
from det_airflow.searcher._rung import WORST


class StoppingBracket(AshaBracket):
    """One bracket of stop-based ASHA (docs/semantics.md §1.2, "One ASHA bracket").

    Rung ``i`` needs ``max(int(L / d**(num_rungs-i-1)), 1)`` units, not cumulative: the top rung is
    ``L``. On each validation, from the trial's current rung up: below the rung's units, stop
    checking; else the value joins the rung; at the top rung the trial is done (Stop); elsewhere it
    goes on only while it ranks within the best ``max(int(n/d), 1)`` of the rung, else Stop. A trial
    that errors or is canceled counts as the worst value in the rung it was training toward.

    Example:
        >>> bracket = StoppingBracket(Bracket(num_rungs=2, max_trials=4, max_concurrent_trials=4),
        ...                           length=100, divisor=4)
        >>> bracket.units
        [25, 100]
    """

    def __init__(self, plan: Bracket, *, length: int, divisor: float) -> None:
        super().__init__(plan, rung_units(length, divisor, plan.num_rungs), divisor)

    def operation_length(self, request_id: int) -> int:
        return self.units[-1]

    def record(self, request_id: int, time: int, value: float) -> list[Action]:
        entry = self._trials[request_id]
        if entry[0] != RUNNING:
            return []  # a report on the way out, after its Stop
        top = len(self.units) - 1
        for index in range(entry[1], top + 1):
            entry[1] = index
            if time < self.units[index]:
                return []
            rank = self._rungs[index].insert(request_id, value)
            if index == top:
                self._top.add(request_id)
                return self._stop(request_id)
            if rank >= max(int(len(self._rungs[index]) / self._divisor), 1):
                return self._stop(request_id)
        return []

    def exited(self, request_id: int) -> list[Action]:
        if self._trials[request_id][0] != CLOSED:
            self._set(request_id, CLOSED)
        return []

    def exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        entry = self._trials[request_id]
        if entry[0] == CLOSED:
            return []
        if reason is ExitedReason.INVALID_HP:
            self._forget_invalid(request_id)
            return []
        if entry[0] != STOPPING:
            self._rungs[entry[1]].insert(request_id, WORST)
        self._set(request_id, CLOSED)
        return []
