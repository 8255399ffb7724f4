"""Running a search method offline against made-up learning curves (``det preview-search``,
benchmarks): the same method code the master drives, with a stand-in for the trials."""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from det_airflow.searcher._actions import Action, Create, Pause, Resume, Shutdown, Stop
from det_airflow.searcher._base import SearchMethod

#: ``metric(create, units)``: the searcher metric a trial reports after training ``units``.
MetricFunction = Callable[[Create, int], float]


@dataclass
class SimulatedTrial:
    """A trial as the simulation ran it."""

    create: Create
    state: str = "running"  # running, paused, stopped (by the search), exited (on its own)
    units: int = 0  # trained so far; final once stopped or exited
    reports: list[tuple[int, float]] = field(default_factory=list)  # (units, value)


@dataclass(frozen=True)
class Report:
    """One validation report, with the units all trials together had trained by then."""

    request_id: int
    units: int
    value: float
    spent: int


@dataclass
class Simulation:
    """What a simulated search did."""

    trials: dict[int, SimulatedTrial]
    actions: list[Action]
    reports: list[Report]
    spent: int  # units trained by all trials together
    finished: bool  # the method shut down (False: the budget ran out first)

    def lengths(self) -> Counter[int]:
        """How many trials ended at each training length."""
        return Counter(trial.units for trial in self.trials.values())


class _Trials:
    """Trials training at one unit per tick, all at once: a heap of their next validations."""

    def __init__(self, method: SearchMethod, points: Sequence[int], default_length: int) -> None:
        self.method = method
        self.points = sorted(set(points))
        self.default_length = default_length
        self.trials: dict[int, SimulatedTrial] = {}
        self.clock = 0
        self.spent = 0
        self._since: dict[int, tuple[int, int]] = {}  # running trial -> (clock, units) when it (re)started
        self._heap: list[tuple[int, int, int]] = []  # (clock of next validation, sequence, request id)
        self._sequence = 0
        self._scheduled: dict[int, int] = {}  # running trial -> sequence of its live heap entry

    def target(self, request_id: int) -> int:
        length = self.method.operation_length(request_id)
        return self.default_length if length is None else length

    def start(self, request_id: int) -> None:
        trial = self.trials[request_id]
        trial.state = "running"
        self._since[request_id] = (self.clock, trial.units)
        target = self.target(request_id)
        index = bisect.bisect_right(self.points, trial.units)
        point = min(self.points[index], target) if index < len(self.points) else target
        self._sequence += 1
        self._scheduled[request_id] = self._sequence
        heapq.heappush(self._heap, (self.clock + max(point - trial.units, 0), self._sequence, request_id))

    def halt(self, request_id: int, state: str) -> None:
        trial = self.trials[request_id]
        if trial.state == "running":
            started, units = self._since.pop(request_id)
            trial.units = units + self.clock - started
            del self._scheduled[request_id]
        trial.state = state

    def next_validation(self, budget: int | None) -> int | None:
        """Advances the clock to the next validation; None when none is left or the budget ends."""
        while self._heap:
            when, sequence, request_id = self._heap[0]
            if self._scheduled.get(request_id) != sequence:
                heapq.heappop(self._heap)  # paused, stopped or rescheduled since
                continue
            spent = self.spent + len(self._since) * (when - self.clock)
            if budget is not None and spent > budget:
                self.spent = budget
                return None
            heapq.heappop(self._heap)
            self.spent, self.clock = spent, when
            started, units = self._since[request_id]
            self.trials[request_id].units = units + when - started
            return request_id
        return None


def simulate(
    method: SearchMethod,
    metric: MetricFunction,
    *,
    validate_at: Sequence[int] = (),
    default_length: int | None = None,
    budget: int | None = None,
) -> Simulation:
    """Drives ``method`` until it shuts down (or ``budget`` units are spent), with trials that all
    train at the same speed and report ``metric(create, units)``.

    Every trial validates at each length in ``validate_at`` (default: the method's rung lengths, if
    it has any) and at its ``operation_length``; it ends when the method stops it, or on its own
    when it reaches that length. Reports carry the searcher metric and, when the searcher has one,
    its time metric (or ``records`` / ``epochs``) set to the units trained.

    Args:
        method: A fresh search method (``initial_trials`` not yet called).
        metric: The value a trial reports after training so many units.
        validate_at: Lengths at which every trial validates.
        default_length: How long trials train when the method gives no ``operation_length``
            (default: the searcher's ``max_time`` or ``max_length``, else 1).
        budget: Stop once all trials together trained this many units.

    Example:
        >>> # adaptive_asha, max_trials 16, max_length {batches: 937}
        >>> sim = simulate(make_search_method(config), lambda create, units: rng.random())
        >>> sorted(sim.lengths().items())  # trials per training length
        [(58, 5), (234, 4), (937, 7)]
    """
    searcher = method.config.searcher
    if default_length is None:
        length = searcher.max_time or (searcher.max_length.value if searcher.max_length else 0)
        default_length = max(length, 1)
    if not validate_at:
        validate_at = getattr(method, "rung_lengths", lambda: [])()
    time_key = searcher.time_metric
    if time_key is None and searcher.max_length is not None and searcher.max_length.unit != "batches":
        time_key = searcher.max_length.unit
    trials = _Trials(method, [*validate_at, default_length], default_length)
    actions: list[Action] = []
    reports: list[Report] = []
    finished = False

    def carry_out(new: list[Action]) -> None:
        nonlocal finished
        pending = list(new)
        while pending:
            action = pending.pop(0)
            actions.append(action)
            if isinstance(action, Create):
                trials.trials[action.request_id] = SimulatedTrial(action)
                trials.start(action.request_id)
                pending += method.trial_created(action.request_id)
            elif isinstance(action, Stop):
                trial = trials.trials[action.request_id]
                was_running = trial.state == "running"
                if trial.state in ("running", "paused"):
                    trials.halt(action.request_id, "stopped")
                if was_running:
                    pending += method.trial_exited(action.request_id)
            elif isinstance(action, Pause):
                trials.halt(action.request_id, "paused")
            elif isinstance(action, Resume):
                trials.start(action.request_id)
            elif isinstance(action, Shutdown):
                finished = True

    carry_out(method.initial_trials())
    while not finished:
        request_id = trials.next_validation(budget)
        if request_id is None:
            break
        trial = trials.trials[request_id]
        value = metric(trial.create, trial.units)
        trial.reports.append((trial.units, value))
        reports.append(Report(request_id, trial.units, value, trials.spent))
        metrics: dict[str, Any] = {searcher.metric: value}
        if time_key is not None:
            metrics[time_key] = trial.units
        carry_out(method.validation_completed(request_id, metrics, trial.units))
        if trial.state != "running":
            continue
        if trial.units >= trials.target(request_id):
            trials.halt(request_id, "exited")
            carry_out(method.trial_exited(request_id))
        else:
            trials.start(request_id)
    return Simulation(trials.trials, actions, reports, trials.spent, finished)


def closed_form_lengths(method: SearchMethod) -> Counter[int] | None:
    """How many trials end at each length, by Determined 0.38's preview formula for stop-based ASHA.

    Per bracket, at each rung below the top ``max(int(trials / divisor), 1)`` trials continue and
    the rest stop at that rung's length; the trials left reach the top rung. The counts of all
    brackets are added up. Answers None for a method this formula does not describe (promotion
    ASHA, searches without rungs), which only a simulation can preview.

    Example:
        >>> # adaptive_asha conservative, max_trials 10, max_time 1000, divisor 3
        >>> sorted(closed_form_lengths(make_search_method(config)).items())
        [(111, 5), (333, 2), (1000, 3)]
    """
    searcher = method.config.searcher
    brackets = getattr(method, "brackets", None)
    if not brackets or not searcher.stop_once:
        return None
    lengths: Counter[int] = Counter()
    for bracket in brackets:
        trials = bracket.plan.max_trials
        *lower, top = bracket.units
        for units in lower:
            continued = max(int(trials / searcher.divisor), 1)
            lengths[units] += max(trials - continued, 0)
            trials = min(continued, trials)
        lengths[top] += trials
    return +lengths
