"""Learning curves of an experiment's trials for charts: one metric of one group, every trial.

An experiment of 1,000 trials × 1,000 reports is a million metric rows. The database pulls the
metric out of each row's JSON, rows come back as the driver's tuples straight into numpy, each
series is downsampled (LTTB) except those of the best trials, and each trial's encoded series is
kept until the trial reports again, so that a refresh reads only the trials that reported since."""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from sqlalchemy import Connection, Float, Row, cast, extract, func, select, text
from sqlalchemy.sql.elements import ColumnElement

from det_airflow.master import experiments, schema
from det_airflow.master.downsample import Array, lttb_many

Group = Literal["training", "validation"]
XAxis = Literal["batches", "time"]
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
    whole = set(best) if downsample else {t.id for t in trial_rows}
    cached = fragments.view((str(conn.engine.url), query, metric))
    versions = {
        t.id: (t.run_id, json.dumps((t.summary or {}).get(query.group), sort_keys=True), t.id in whole)
        for t in trial_rows
    }
    stale = [t for t in trial_rows if t.id not in cached or cached[t.id][0] != versions[t.id]]
    if stale and metric:
        series, counts = _series(conn, stale, query, metric)
        thin = [t for t in series if t not in whole]
        series.update(zip(thin, lttb_many([series[t] for t in thin], query.points), strict=True))
        for t in stale:
            xs, ys = series.get(t.id, (_EMPTY, _EMPTY))
            # Encoded here, by the json module's C encoder, once per change of the trial: FastAPI's
            # generic encoder would walk every number of a million one by one on every request.
            cached[t.id] = (
                versions[t.id],
                json.dumps(
                    {"points": counts.get(t.id, 0), "x": xs.tolist(), "y": ys.tolist()}, separators=(",", ":")
                ).encode(),
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
        json.dumps({"trial_id": t.id, "state": t.state, "hparams": t.hparams}, separators=(",", ":"))[
            :-1
        ].encode()
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


def _y_column(conn: Connection, metric: str) -> ColumnElement[Any]:
    """The metric as a float, NULL where a report lacks it or holds something else than a number."""
    m = schema.metrics.c.metrics
    dialect = conn.dialect.name
    if dialect == "sqlite":
        path = '$."' + metric.replace('"', '\\"') + '"'
        return text(
            "CASE WHEN json_type(det_metrics.metrics, :path) IN ('integer', 'real') "
            "THEN json_extract(det_metrics.metrics, :path) END"
        ).bindparams(path=path)  # type: ignore[return-value]
    if dialect == "postgresql":
        return text(
            "CASE WHEN json_typeof(det_metrics.metrics -> :name) = 'number' "
            "THEN CAST(det_metrics.metrics ->> :name AS DOUBLE PRECISION) END"
        ).bindparams(name=metric)  # type: ignore[return-value]
    return m[metric].as_float()


def _x_column(conn: Connection, x: XAxis) -> ColumnElement[Any]:
    m = schema.metrics.c
    if x == "batches":
        return m.steps_completed
    if conn.dialect.name == "sqlite":
        # Datetimes are text there. A Julian day as a double is good to about 50 µs: rounded to
        # milliseconds, the Unix time comes out exact.
        return func.round((func.julianday(m.report_time) - 2440587.5) * 86400.0, 3)
    return cast(extract("epoch", m.report_time), Float)


def _series(
    conn: Connection, trial_rows: list[Row], query: CurveQuery, metric: str
) -> tuple[dict[int, tuple[Array, Array]], dict[int, int]]:
    """Each trial's finite (x, y) points in report order, and how many there were."""
    m = schema.metrics
    ids = [t.id for t in trial_rows]
    in_trials = (
        m.c.trial_id.in_(ids)
        if len(ids) <= 500
        else m.c.trial_id.in_(
            select(schema.trials.c.id).where(schema.trials.c.experiment_id == query.experiment_id)
        )
    )
    result = conn.execute(
        select(m.c.trial_id, _x_column(conn, query.x), _y_column(conn, metric))
        .where(in_trials, m.c.group == query.group)
        .order_by(m.c.trial_id, m.c.steps_completed, m.c.id)
    )
    # The driver's plain tuples (all numbers, nothing to convert): building a million Row objects
    # would cost as much as the read itself, and numpy reads tuples far faster than Rows.
    try:
        rows = result.cursor.fetchall()
    finally:
        result.close()
    table = np.array(rows, dtype=np.float64).reshape(-1, 3)
    table = table[np.isfinite(table[:, 1]) & np.isfinite(table[:, 2])]
    if not len(table):
        return {}, {}
    wanted = set(ids)
    trial_ids = table[:, 0].astype(np.int64)
    starts = np.flatnonzero(np.diff(trial_ids, prepend=-1))
    ends = np.append(starts[1:], len(trial_ids))
    origin = {t.id: _epoch(t.start_time) for t in trial_rows} if query.x == "time" else {}
    series: dict[int, tuple[Array, Array]] = {}
    counts: dict[int, int] = {}
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        trial_id = int(trial_ids[lo])
        if trial_id not in wanted:
            continue
        xs, ys = table[lo:hi, 1], table[lo:hi, 2]
        if query.x == "time":
            # Seconds since the trial started (its first report when the start is unknown).
            start = origin.get(trial_id)
            xs = xs - (xs[0] if start is None else min(start, xs[0]))
        else:
            xs = xs.astype(np.int64)
        series[trial_id] = (xs, ys)
        counts[trial_id] = hi - lo
    return series, counts


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite keeps no zone; the master writes UTC
        value = value.replace(tzinfo=UTC)
    return value.timestamp()
