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
    # All series end to end, each followed by at least one unused slot, so that a flat index
    # addresses any point and no bucket of one series reaches into the next.
    stride = int(n.max()) + 1
    xs = np.zeros(t * stride)
    ys = np.zeros(t * stride)
    base = np.arange(t, dtype=np.int64) * stride
    for row, (x, y) in enumerate(series):
        xs[base[row] : base[row] + len(x)] = x
        ys[base[row] : base[row] + len(y)] = y
    every = (n - 2) / (points - 2)  # per series
    # Bucket b of series s covers [start[s, b], start[s, b + 1]); the last one ends before the last point.
    start = np.floor(np.outer(every, np.arange(points - 1))).astype(np.int64) + 1
    start[:, -1] = n - 1

    # The average of each bucket's successor (the last bucket's successor is the last point): the
    # successors end to end are the segments between these bounds; the one from a series' end to
    # the next series' start is dropped.
    bounds = np.concatenate([start[:, 1:], n[:, None]], axis=1) + base[:, None]
    count = np.diff(bounds, axis=1).astype(np.float64)
    avg_x = np.add.reduceat(xs, bounds.ravel()).reshape(t, points - 1)[:, :-1] / count
    avg_y = np.add.reduceat(ys, bounds.ravel()).reshape(t, points - 1)[:, :-1] / count
    avg_x, avg_y = np.ascontiguousarray(avg_x.T), np.ascontiguousarray(avg_y.T)

    # Each bucket's candidates as flat indices; the slots past a bucket's end repeat its last point,
    # which argmax (the first of equal areas) never prefers over the point itself.
    first = np.ascontiguousarray((start[:, :-1] + base[:, None]).T)
    last = np.ascontiguousarray((start[:, 1:] - 1 + base[:, None]).T)
    slots = np.arange(width)
    picked = np.arange(t) * width  # flat index of each series' first slot in a t × width block

    keep = np.empty((points, t), dtype=np.int64)
    keep[0] = base
    keep[-1] = base + n - 1
    ax, ay = xs[base], ys[base]
    for b in range(points - 2):
        cand = np.minimum(first[b][:, None] + slots, last[b][:, None])
        bx, by = xs[cand], ys[cand]
        # The triangle's doubled area, in the textbook's order of operations (same rounding).
        area = by - ay[:, None]
        area *= (ax - avg_x[b])[:, None]
        other = ax[:, None] - bx
        other *= (avg_y[b] - ay)[:, None]
        area -= other
        np.abs(area, out=area)
        best = cand.ravel()[picked + np.argmax(area, axis=1)]
        keep[b + 1] = best
        ax, ay = xs[best], ys[best]
    return (keep - base).T.astype(np.intp)
