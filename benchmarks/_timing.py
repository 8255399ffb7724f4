"""Timing of short calls for the decision benchmarks (gate_decision.py, placement.py)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed_ms(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, fastest) milliseconds of ``repeat`` calls after a warm-up; the fastest is the cost
    without the interference of other work on a shared machine."""
    for _ in range(min(repeat, 20)):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000, min(samples) * 1000
