"""What every ASHA bracket tracks: its rungs, its trials' states, and how many it may still start."""

from __future__ import annotations

import abc
from typing import Any

from det_airflow.searcher._actions import Action, ExitedReason, Stop
from det_airflow.searcher._brackets import Bracket
from det_airflow.searcher._rung import Rung, pack, unpack

# A trial's state within its bracket.
RUNNING = "running"  # training toward its rung; holds a concurrency place
STOPPING = "stopping"  # told to Stop; its exit is awaited
PAUSED = "paused"  # promotion-based only: reached its rung, waits holding no slot
CLOSED = "closed"  # over
# One letter per state in the stored trial table.
_LETTERS = {RUNNING: "r", STOPPING: "s", PAUSED: "p", CLOSED: "c"}
_STATES = {letter: state for state, letter in _LETTERS.items()}


class AshaBracket(abc.ABC):
    """One bracket's bookkeeping; the search method turns its decisions into actions.

    Values given to a bracket are already ordered smaller-is-better (see :func:`._rung.ordered`).
    A bracket counts the trials that count toward its ``max_trials`` (one with invalid
    hyperparameters does not) and the ones running, against its concurrency.
    """

    def __init__(self, plan: Bracket, units: list[int], divisor: float) -> None:
        self.plan = plan
        #: Units each rung needs, bottom to top.
        self.units = units
        self._divisor = divisor
        self._rungs = [Rung() for _ in units]
        # request id -> [state, index of the rung it trains toward (or last reached)]
        self._trials: dict[int, list[Any]] = {}
        self._top: set[int] = set()  # trials that reached the top rung
        self._created = 0
        self._running = 0
        self._closed = 0

    # --- the search method asks ------------------------------------------------------------------

    def wants_trial(self) -> bool:
        """Whether to create a trial now: some of ``max_trials`` are left and concurrency allows."""
        return self.more_to_create() and self._running < self.plan.max_concurrent_trials

    def more_to_create(self) -> bool:
        return self._created < self.plan.max_trials

    def completed(self) -> int:
        """Closed trials that count toward ``max_trials``."""
        return self._closed

    def state(self, request_id: int) -> str:
        return self._trials[request_id][0]

    def reached_top(self, request_id: int) -> bool:
        return request_id in self._top

    @abc.abstractmethod
    def operation_length(self, request_id: int) -> int:
        """The units the trial should train to now."""

    # --- events ----------------------------------------------------------------------------------

    def add(self, request_id: int) -> None:
        """A new trial of this bracket; it trains toward the bottom rung."""
        self._trials[request_id] = [RUNNING, 0]
        self._created += 1
        self._running += 1

    @abc.abstractmethod
    def record(self, request_id: int, time: int, value: float) -> list[Action]:
        """A running trial reported ``value`` after ``time`` units."""

    @abc.abstractmethod
    def exited(self, request_id: int) -> list[Action]:
        """The trial's process ended normally."""

    @abc.abstractmethod
    def exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        """The trial ended with invalid hyperparameters, a user's cancel or an error."""

    # --- shared steps ----------------------------------------------------------------------------

    def _set(self, request_id: int, state: str) -> None:
        """Moves a trial to ``state``, keeping the running and closed counts."""
        entry = self._trials[request_id]
        if entry[0] == RUNNING:
            self._running -= 1
        if state == RUNNING:
            self._running += 1
        elif state == CLOSED:
            self._closed += 1
        entry[0] = state

    def _stop(self, request_id: int) -> list[Action]:
        self._set(request_id, STOPPING)
        return [Stop(request_id)]

    def _forget_invalid(self, request_id: int) -> None:
        """A trial with invalid hyperparameters: its values and its place in ``max_trials`` go."""
        entry = self._trials[request_id]
        for rung in self._rungs[: entry[1] + 1]:
            rung.remove(request_id)
        if entry[0] == RUNNING:
            self._running -= 1
        entry[0] = CLOSED
        self._created -= 1

    # --- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "rungs": [rung.state_dict() for rung in self._rungs],
            # The trial table packed: request ids, rung indexes, one letter per state.
            "trials": [
                pack("q", list(self._trials)),
                pack("q", [entry[1] for entry in self._trials.values()]),
                "".join(_LETTERS[entry[0]] for entry in self._trials.values()),
            ],
            "top": sorted(self._top),
            "created": self._created,
            "running": self._running,
            "closed": self._closed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rungs = [Rung.from_state(rung) for rung in state["rungs"]]
        ids, rungs, letters = state["trials"]
        self._trials = {
            request_id: [_STATES[letter], rung]
            for request_id, rung, letter in zip(unpack("q", ids), unpack("q", rungs), letters, strict=True)
        }
        self._top = set(state["top"])
        self._created = state["created"]
        self._running = state["running"]
        self._closed = state["closed"]
