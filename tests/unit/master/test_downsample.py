"""LTTB of many series at once picks the same points as the textbook one-series algorithm."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from det_airflow.master.downsample import lttb, lttb_many


def reference_lttb(x: list[float], y: list[float], points: int) -> list[int]:
    """Indices kept by largest-triangle-three-buckets as first published, one bucket at a time."""
    n = len(x)
    if n <= points:
        return list(range(n))
    every = (n - 2) / (points - 2)
    kept, a = [0], 0
    for i in range(points - 2):
        lo, hi = math.floor((i + 1) * every) + 1, min(math.floor((i + 2) * every) + 1, n)
        avg_x, avg_y = sum(x[lo:hi]) / (hi - lo), sum(y[lo:hi]) / (hi - lo)
        start, end = math.floor(i * every) + 1, math.floor((i + 1) * every) + 1
        best, best_area = start, -1.0
        for j in range(start, end):
            area = abs((x[a] - avg_x) * (y[j] - y[a]) - (x[a] - x[j]) * (avg_y - y[a]))
            if area > best_area:
                best, best_area = j, area
        kept.append(best)
        a = best
    kept.append(n - 1)
    return kept


def noisy_curve(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = random.Random(seed)
    x = np.arange(1, n + 1, dtype=np.float64) * 10
    y = np.array([math.exp(-k / (n / 5)) + rng.gauss(0, 0.05) for k in range(n)])
    return x, y


@pytest.mark.parametrize(("n", "points"), [(1000, 400), (1001, 10), (57, 13), (10_000, 400), (401, 400)])
def test_one_series_matches_the_reference(n: int, points: int) -> None:
    x, y = noisy_curve(n, seed=n)
    kept_x, kept_y = lttb(x, y, points)
    expected = reference_lttb(x.tolist(), y.tolist(), points)
    assert kept_x.tolist() == x[expected].tolist()
    assert kept_y.tolist() == y[expected].tolist()
    assert len(kept_x) == points


def test_series_of_different_lengths_each_match_the_reference() -> None:
    lengths = [1000, 999, 1500, 5000, 30, 400, 401, 2]
    series = [noisy_curve(n, seed=i) for i, n in enumerate(lengths)]
    results = lttb_many(series, 400)
    for (x, y), (kept_x, kept_y) in zip(series, results, strict=True):
        expected = reference_lttb(x.tolist(), y.tolist(), 400)
        assert kept_x.tolist() == x[expected].tolist()
        assert kept_y.tolist() == y[expected].tolist()


def test_short_series_come_back_unchanged_and_the_ends_are_always_kept() -> None:
    x, y = noisy_curve(300, seed=3)
    same_x, same_y = lttb(x, y, 400)
    assert same_x is x and same_y is y
    long_x, long_y = noisy_curve(2000, seed=4)
    kept_x, _ = lttb(long_x, long_y, 50)
    assert (kept_x[0], kept_x[-1]) == (long_x[0], long_x[-1])
    assert np.all(np.diff(kept_x) > 0)


def test_a_spike_survives_downsampling() -> None:
    x = np.arange(5000, dtype=np.float64)
    y = np.zeros(5000)
    y[2345] = 100.0
    _, kept_y = lttb(x, y, 100)
    assert kept_y.max() == 100.0


def test_fewer_than_three_points_is_refused() -> None:
    x, y = noisy_curve(10, seed=1)
    with pytest.raises(ValueError, match="points must be at least 3, got 2"):
        lttb(x, y, 2)
