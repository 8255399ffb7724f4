"""Promotion-based ASHA (*seed* era, ``stop_once: false``): trials train one rung at a time, pause,
and go on only when promoted."""

from __future__ import annotations

from det_airflow.searcher._actions import Action, ExitedReason, Pause, Resume, Stop
from det_airflow.searcher._asha_bracket import CLOSED, PAUSED, RUNNING, AshaBracket
from det_airflow.searcher._brackets import Bracket, cumulative_rung_units
from det_airflow.searcher._rung import WORST


class PromotionBracket(AshaBracket):
    """One bracket of promotion-based ASHA, as Determined's *seed*-era ``asyncHalvingSearch``.

    Rungs are cumulative (58, 292, 1229 for L 937, d 4, 3 rungs): a trial's ``operation_length`` is
    its current rung's units. A trial that reaches them joins the rung; the best ``int(n/d)`` of a
    rung are promoted: a new arrival good enough goes straight on, otherwise it is paused
    (:class:`Pause`), and whenever the promoted count grows the trial at the boundary is resumed
    (:class:`Resume`). A trial reaching the top rung is done (:class:`Stop`). A trial that errors,
    is canceled or ends on its own before its rung counts as the worst value there; if such a trial
    is ever promoted, it arrives at the next rung with the worst value again.

    Once every trial has reported at the bottom rung, each rung with no trial still training toward
    it (and none below it) is closed out: its paused trials that were never promoted get a Stop.
    """

    def __init__(self, plan: Bracket, *, length: int, divisor: float) -> None:
        super().__init__(plan, cumulative_rung_units(length, divisor, plan.num_rungs), divisor)
        # Trials training toward each rung (arrivals still to come), and rungs closed out so far.
        self._outstanding = [0] * plan.num_rungs
        self._closed_out = 0

    def operation_length(self, request_id: int) -> int:
        return self.units[self._trials[request_id][1]]

    def add(self, request_id: int) -> None:
        super().add(request_id)
        self._outstanding[0] += 1

    def record(self, request_id: int, time: int, value: float) -> list[Action]:
        entry = self._trials[request_id]
        actions: list[Action] = []
        # A report far enough past its rung can carry a trial promoted at once up several rungs.
        while entry[0] == RUNNING and time >= self.units[entry[1]]:
            actions += self._arrive(request_id, entry[1], value)
        return actions + self._close_out()

    def exited(self, request_id: int) -> list[Action]:
        entry = self._trials[request_id]
        if entry[0] in (PAUSED, CLOSED):
            return []  # a paused trial's process ending is part of pausing
        was_running = entry[0] == RUNNING
        self._set(request_id, CLOSED)
        actions = self._arrive_closed(request_id, entry[1]) if was_running else []
        return actions + self._close_out()

    def exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        entry = self._trials[request_id]
        if entry[0] == CLOSED:
            return []
        actions: list[Action] = []
        if reason is ExitedReason.INVALID_HP:
            if entry[0] == RUNNING:
                self._outstanding[entry[1]] -= 1
            self._forget_invalid(request_id)
        else:
            was_running = entry[0] == RUNNING
            self._set(request_id, CLOSED)
            if was_running:
                actions = self._arrive_closed(request_id, entry[1])
        return actions + self._close_out()

    # --- promotions ------------------------------------------------------------------------------

    def _arrive(self, request_id: int, index: int, value: float) -> list[Action]:
        """A running trial reached rung ``index`` with ``value``."""
        self._outstanding[index] -= 1
        if index == len(self.units) - 1:
            self._rungs[index].insert(request_id, value)
            self._top.add(request_id)
            return self._stop(request_id)
        promoted = self._rungs[index].insert_promoting(request_id, value, self._divisor)
        if promoted == request_id:
            self._move_up(request_id, index + 1)
            return []
        self._set(request_id, PAUSED)
        actions: list[Action] = [Pause(request_id)]
        if promoted is not None:
            actions += self._promote(promoted, index + 1)
        return actions

    def _arrive_closed(self, request_id: int, index: int) -> list[Action]:
        """A closed trial 'reaches' rung ``index`` with the worst value: it cannot train there."""
        self._outstanding[index] -= 1
        if index == len(self.units) - 1:
            self._rungs[index].insert(request_id, WORST)
            return []
        promoted = self._rungs[index].insert_promoting(request_id, WORST, self._divisor)
        return [] if promoted is None else self._promote(promoted, index + 1)

    def _promote(self, request_id: int, index: int) -> list[Action]:
        self._move_up(request_id, index)
        if self._trials[request_id][0] == PAUSED:
            self._set(request_id, RUNNING)
            return [Resume(request_id)]
        return self._arrive_closed(request_id, index)

    def _move_up(self, request_id: int, index: int) -> None:
        self._trials[request_id][1] = index
        self._outstanding[index] += 1

    def _close_out(self) -> list[Action]:
        """Stops the never-promoted trials of every rung that can receive no more arrivals."""
        if self.more_to_create():
            return []
        actions: list[Action] = []
        top = len(self.units) - 1
        while self._closed_out < top and self._outstanding[self._closed_out] == 0:
            rung = self._rungs[self._closed_out]
            for request_id in rung.ids:
                if request_id not in rung.promoted and self._trials[request_id][0] == PAUSED:
                    self._set(request_id, CLOSED)
                    actions.append(Stop(request_id))
            self._closed_out += 1
        return actions

    # --- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "outstanding": list(self._outstanding),
            "closed_out": self._closed_out,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._outstanding = list(state["outstanding"])
        self._closed_out = state["closed_out"]
