"""Largest-triangle-three-buckets downsampling of many chart series at once.

LTTB keeps the first and last points and, from each of ``points - 2`` equal buckets in between, the
point that forms the largest triangle with the point kept from the bucket before and the average of
the bucket after: the shape a chart draws survives while most points go.

The choice in each bucket depends on the previous one, so the loop over buckets is sequential; it
runs once for a whole group of series (numpy arrays of trials × candidates), not once per series.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


def lttb(x: Array, y: Array, points: int) -> tuple[Array, Array]:
    """One series reduced to ``points`` points (unchanged when it has no more than that)."""
    return lttb_many([(x, y)], points)[0]


def lttb_many(series: Sequence[tuple[Array, Array]], points: int) -> list[tuple[Array, Array]]:
    """Each (x, y) series reduced to at most ``points`` points; x must be sorted ascending."""
    if points < 3:
        raise ValueError(f"points must be at least 3, got {points}")
    out: list[tuple[Array, Array]] = list(series)
    # Series whose buckets are about as wide go through the loop together, so that no group pads
    # short series to the width of a much longer one.
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (x, _y) in enumerate(series):
        if len(x) > points:
            groups[_bucket_width(len(x), points)].append(i)
    for width, members in groups.items():
        picked = _lttb_group([series[i] for i in members], points, width)
        for i, (x, y), keep in zip(members, (series[i] for i in members), picked, strict=True):
            out[i] = (x[keep], y[keep])
    return out


def _bucket_width(n: int, points: int) -> int:
    every = (n - 2) / (points - 2)
    return int(np.floor(every)) + 1


def _lttb_group(series: Sequence[tuple[Array, Array]], points: int, width: int) -> npt.NDArray[np.intp]:
    """Indices kept, one row per series (all of them longer than ``points``)."""
    t = len(series)
    n = np.array([len(x) for x, _ in series], dtype=np.int64)
    longest = int(n.max())
    xs = np.zeros((t, longest))
    ys = np.zeros((t, longest))
    for row, (x, y) in enumerate(series):
        xs[row, : len(x)] = x
        ys[row, : len(y)] = y
    every = (n - 2) / (points - 2)  # per series
    buckets = np.arange(points - 2)
    # Bucket b of series s covers [start[s, b], start[s, b + 1]); the last one ends before the last point.
    start = np.floor(np.outer(every, np.arange(points - 1))).astype(np.int64) + 1
    start[:, -1] = n - 1
    rows = np.arange(t)[:, None]

    # The average of each bucket's successor (the last bucket's successor is the last point).
    cx = np.concatenate([np.zeros((t, 1)), np.cumsum(xs, axis=1)], axis=1)
    cy = np.concatenate([np.zeros((t, 1)), np.cumsum(ys, axis=1)], axis=1)
    nxt_lo = start[:, 1:]
    nxt_hi = np.concatenate([start[:, 2:], n[:, None]], axis=1)
    count = (nxt_hi - nxt_lo).astype(np.float64)
    avg_x = (cx[rows, nxt_hi] - cx[rows, nxt_lo]) / count
    avg_y = (cy[rows, nxt_hi] - cy[rows, nxt_lo]) / count

    # Candidates of every bucket: t × buckets × width, the slots past a bucket's end masked out.
    cand = start[:, :-1, None] + np.arange(width)[None, None, :]
    valid = cand < start[:, 1:, None]
    cand = np.minimum(cand, (n - 1)[:, None, None])
    cand_x = xs[rows[:, :, None], cand]
    cand_y = ys[rows[:, :, None], cand]

    keep = np.empty((t, points), dtype=np.intp)
    keep[:, 0] = 0
    keep[:, -1] = n - 1
    ax, ay = xs[:, 0], ys[:, 0]
    flat = np.arange(t)
    for b in buckets:
        bx, by = cand_x[:, b, :], cand_y[:, b, :]
        area = np.abs(
            (ax - avg_x[:, b])[:, None] * (by - ay[:, None])
            - (ax[:, None] - bx) * (avg_y[:, b] - ay)[:, None]
        )
        area = np.where(valid[:, b, :], area, -1.0)
        best = np.argmax(area, axis=1)
        keep[:, b + 1] = cand[flat, b, best]
        ax, ay = bx[flat, best], by[flat, best]
    return keep
