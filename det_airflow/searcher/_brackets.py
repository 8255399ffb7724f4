"""ASHA's bracket arithmetic (docs/semantics.md §1.2), as pure functions of the searcher config.

Kept apart from the search methods so each formula can be checked against Determined's worked
examples on its own.

Example:
    >>> [(b.num_rungs, b.max_trials, b.max_concurrent_trials) for b in plan_brackets(
    ...     max_trials=16, length=937, divisor=4, mode="standard", max_rungs=5,
    ...     max_concurrent_trials=16)]
    [(3, 12, 8), (2, 4, 8)]
    >>> rung_units(937, 4, 3)
    [58, 234, 937]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Mode = Literal["aggressive", "standard", "conservative"]


@dataclass(frozen=True)
class Bracket:
    """One ASHA bracket of an adaptive search: its rungs, trials and concurrency."""

    num_rungs: int
    max_trials: int
    max_concurrent_trials: int


def rung_count(*, length: int, divisor: float, max_trials: int, max_rungs: int) -> int:
    """R: the most rungs a bracket can usefully have.

    ``min(max_rungs, int(log(L)/log(d)) + 1, int(log(max_trials)/log(d)) + 1)``, computed in floating
    point as Determined does (so ``L = 1000, d = 10`` gives 3, not 4).
    """
    by_length = int(math.log(length) / math.log(divisor)) + 1
    by_trials = int(math.log(max_trials) / math.log(divisor)) + 1
    return min(max_rungs, by_length, by_trials)


def mode_rungs(mode: Mode, rungs: int) -> list[int]:
    """Rungs per bracket for a mode: aggressive ``[R]``; standard ``[(R-1)//2+1 .. R]``;
    conservative ``[1 .. R]``."""
    if mode == "aggressive":
        return [rungs]
    if mode == "standard":
        return list(range((rungs - 1) // 2 + 1, rungs + 1))
    return list(range(1, rungs + 1))


def bracket_trials(max_trials: int, divisor: float, rungs: Sequence[int]) -> list[int]:
    """Trials per bracket, so that every bracket gets about the same training budget.

    ``weight_i = d**(r_i - 1) / r_i``; ``trials_i = max(int(weight_i / sum * max_trials), 1)``; the
    first bracket also gets whatever is left of ``max_trials``.

    Example:
        >>> bracket_trials(20, 3, [3, 2, 1])
        [12, 5, 3]
    """
    weights = [divisor ** (r - 1) / r for r in rungs]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_concurrency(max_concurrent_trials: int, divisor: float, trials: Sequence[int]) -> list[int]:
    """How many trials each bracket may run at once.

    ``M = max(max_concurrent_trials, n_brackets)`` split evenly, the remainder to the first brackets;
    with ``max_concurrent_trials`` 0 (no limit) every bracket gets ``max(trials_last, int(d))``.
    """
    n = len(trials)
    if max_concurrent_trials == 0:
        return [max(trials[-1], int(divisor))] * n
    total = max(max_concurrent_trials, n)
    share, remainder = divmod(total, n)
    return [share + (1 if i < remainder else 0) for i in range(n)]


def plan_brackets(
    *,
    max_trials: int,
    length: int,
    divisor: float,
    mode: Mode,
    max_rungs: int,
    max_concurrent_trials: int,
    bracket_rungs: Sequence[int] = (),
) -> list[Bracket]:
    """The brackets of an ``adaptive_asha`` search, most aggressive (most rungs) first.

    ``bracket_rungs``, when given, replaces the rungs the mode would choose.
    """
    if bracket_rungs:
        rungs = list(bracket_rungs)
    else:
        rungs = mode_rungs(
            mode, rung_count(length=length, divisor=divisor, max_trials=max_trials, max_rungs=max_rungs)
        )
    rungs.sort(reverse=True)
    trials = bracket_trials(max_trials, divisor, rungs)
    concurrency = bracket_concurrency(max_concurrent_trials, divisor, trials)
    return [Bracket(r, t, c) for r, t, c in zip(rungs, trials, concurrency, strict=True)]


def single_bracket(*, num_rungs: int, max_trials: int, divisor: float, max_concurrent_trials: int) -> Bracket:
    """The one bracket of an ``async_halving`` search.

    With ``max_concurrent_trials`` 0 it runs ``d**(num_rungs-1)`` trials at once (at least 1, at most
    ``max_trials``): enough for one of them to reach the top rung, as Determined does.
    """
    if max_concurrent_trials > 0:
        concurrency = min(max_concurrent_trials, max_trials)
    else:
        concurrency = min(max(int(divisor ** (num_rungs - 1)), 1), max_trials)
    return Bracket(num_rungs, max_trials, concurrency)


def rung_units(length: int, divisor: float, num_rungs: int) -> list[int]:
    """Units each rung needs (Determined 0.38, stop-based): ``max(int(L / d**(num_rungs-i-1)), 1)``.

    Not cumulative: the top rung is ``L`` itself.
    """
    return [max(int(length / divisor ** (num_rungs - i - 1)), 1) for i in range(num_rungs)]


def cumulative_rung_units(length: int, divisor: float, num_rungs: int) -> list[int]:
    """Units each rung needs in promotion-based ASHA (*seed* era): the per-rung units added up.

    Example:
        >>> cumulative_rung_units(937, 4, 3)
        [58, 292, 1229]
    """
    units, total = [], 0
    for step in rung_units(length, divisor, num_rungs):
        total += step
        units.append(total)
    return units
