"""Learning curves of an experiment's trials for charts: one metric of one group, every trial.

An experiment of 1,000 trials × 1,000 reports is a million points. They are read as numbers, packed
per trial and metric at report time (:mod:`det_airflow.master.metric_points`), each series is
downsampled (LTTB) except those of the best trials, and each trial's encoded series is kept until the
trial reports again, so that a refresh reads only the trials that reported since."""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import pydantic_core
from sqlalchemy import Connection, Row, select

from det_airflow.master import experiments, metric_points, schema
from det_airflow.master.downsample import Array, lttb_many

Group = Literal["training", "validation"]
XAxis = Literal["batches", "time", "epochs"]
GROUPS: tuple[Group, ...] = ("training", "validation")
BEST_KEPT_WHOLE = 10
CACHED_VIEWS = 8


@dataclass(frozen=True)
class CurveQuery:
    experiment_id: int
    group: Group
    metric: str | None
    x: XAxis
    points: int
    keep_best: bool = True  # the best trials' series whole; False: every series downsampled


class UnknownMetric(experiments.NotFound):
    """The metric asked for was never reported in that group."""


def metric_names(trial_rows: list[Row]) -> dict[str, list[str]]:
    """Numeric metric names per group, from each trial's latest report (its summary)."""
    names: dict[str, set[str]] = {g: set() for g in GROUPS}
    for trial in trial_rows:
        for group in GROUPS:
            latest = (trial.summary or {}).get(group) or {}
            names[group].update(
                k
                for k, v in latest.items()
                if k != "steps_completed" and isinstance(v, int | float) and not isinstance(v, bool)
            )
    return {g: sorted(n) for g, n in names.items()}


def best_trial_ids(trial_rows: list[Row], smaller_is_better: bool) -> list[int]:
    """Up to BEST_KEPT_WHOLE trials by their best validation of the searcher metric, best first."""
    scored = [t for t in trial_rows if t.best_validation is not None and math.isfinite(t.best_validation)]
    scored.sort(key=lambda t: (t.best_validation if smaller_is_better else -t.best_validation, t.id))
    return [t.id for t in scored[:BEST_KEPT_WHOLE]]


class _FragmentCache:
    """Each trial's encoded series by view, kept while the trial's version is unchanged.

    A trial's version is its run and its latest report of the group (``summary``), which the master
    updates in the same transaction as it stores a metric row: a new row, even one committed out of
    id order, changes it. A refresh then reads and downsamples only the trials that reported since.
    """

    def __init__(self, views: int) -> None:
        self._views = views
        self._items: OrderedDict[tuple, dict[int, tuple[Any, bytes]]] = OrderedDict()
        self._lock = threading.Lock()

    def view(self, key: tuple) -> dict[int, tuple[Any, bytes]]:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                found = self._items[key] = {}
            self._items.move_to_end(key)
            while len(self._items) > self._views:
                self._items.popitem(last=False)
            return found

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


fragments = _FragmentCache(CACHED_VIEWS)


def curves_json(conn: Connection, exp: Row, query: CurveQuery, *, downsample: bool = True) -> bytes:
    """The /curves answer, encoded (docs/master-api.md)."""
    searcher = experiments.experiment_config(exp).searcher
    trial_rows = list(
        conn.execute(
            select(
                schema.trials.c.id,
                schema.trials.c.state,
                schema.trials.c.hparams,
                schema.trials.c.summary,
                schema.trials.c.run_id,
                schema.trials.c.best_validation,
                schema.trials.c.start_time,
            )
            .where(schema.trials.c.experiment_id == exp.id)
            .order_by(schema.trials.c.id)
        ).all()
    )
    names = metric_names(trial_rows)
    metric = query.metric or _default_metric(query.group, names[query.group], searcher.metric)
    if query.metric is not None and metric not in names[query.group]:
        reported = ", ".join(names[query.group]) or "none yet"
        raise UnknownMetric(
            f"experiment {exp.id} has no {query.group} metric '{metric}' (reported: {reported})"
        )
    best = best_trial_ids(trial_rows, searcher.smaller_is_better)
    if not downsample:
        whole = {t.id for t in trial_rows}
    else:
        whole = set(best) if query.keep_best else set()
    cached = fragments.view((str(conn.engine.url), query, metric))
    versions = {t.id: (t.run_id, (t.summary or {}).get(query.group), t.id in whole) for t in trial_rows}
    stale = [t for t in trial_rows if t.id not in cached or cached[t.id][0] != versions[t.id]]
    if stale and metric:
        series, counts = _series(conn, stale, query, metric)
        thin = [t for t in series if t not in whole]
        series.update(zip(thin, lttb_many([series[t] for t in thin], query.points), strict=True))
        for t in stale:
            xs, ys = series.get(t.id, (_EMPTY, _EMPTY))
            # Encoded here, once per change of the trial, by pydantic's serializer (FastAPI's own):
            # it writes the shortest exact form of each float several times faster than the json
            # module, which took most of a first answer's time.
            cached[t.id] = (
                versions[t.id],
                pydantic_core.to_json({"points": counts.get(t.id, 0), "x": xs.tolist(), "y": ys.tolist()}),
            )
    head = {
        "group": query.group,
        "metric": metric,
        "x": query.x,
        "metrics": names,
        "smaller_is_better": searcher.smaller_is_better,
        "best_trial_ids": best,
    }
    parts = [
        pydantic_core.to_json({"trial_id": t.id, "state": t.state, "hparams": t.hparams})[:-1]
        + b","
        + cached[t.id][1][1:]
        for t in trial_rows
        if metric and cached[t.id][1] != _NO_POINTS
    ]
    return json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"series":[' + b",".join(parts) + b"]}"


_EMPTY: Array = np.zeros(0)
_NO_POINTS = b'{"points":0,"x":[],"y":[]}'


def _default_metric(group: Group, names: list[str], searcher_metric: str) -> str | None:
    if group == "validation" and (searcher_metric in names or not names):
        return searcher_metric
    return names[0] if names else None


def _series(
    conn: Connection, trial_rows: list[Row], query: CurveQuery, metric: str
) -> tuple[dict[int, tuple[Array, Array]], dict[int, int]]:
    """Each trial's (x, y) points in report order, and how many there were."""
    stored = metric_points.read(conn, [t.id for t in trial_rows], query.group, metric)
    origin = {t.id: _epoch(t.start_time) for t in trial_rows} if query.x == "time" else {}
    series: dict[int, tuple[Array, Array]] = {}
    counts: dict[int, int] = {}
    for trial_id, points in stored.items():
        if query.x == "epochs":
            points = points[np.isfinite(points[:, metric_points.EPOCHS])]
            if not len(points):
                continue
        ys = points[:, metric_points.VALUE]
        if query.x == "time":
            # Seconds since the trial started (its first report when the start is unknown).
            xs = points[:, metric_points.TIME]
            start = origin.get(trial_id)
            # To the millisecond, as a chart needs: shorter numbers encode and parse faster.
            xs = np.round(xs - (xs[0] if start is None else min(start, xs[0])), 3)
        elif query.x == "epochs":
            xs = points[:, metric_points.EPOCHS]
        else:
            xs = points[:, metric_points.STEPS].astype(np.int64)
        series[trial_id] = (xs, ys)
        counts[trial_id] = len(points)
    return series, counts


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite keeps no zone; the master writes UTC
        value = value.replace(tzinfo=UTC)
    return value.timestamp()
