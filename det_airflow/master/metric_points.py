"""Metric values as numbers, for charts: each trial's series of one metric, kept in packed chunks.

Every finite number of a training or validation report is stored here too, in the same transaction
as the report's JSON row in ``det_metrics``. A series (trial, group, metric name) is a run of rows of
up to ``CHUNK_POINTS`` points, each row one blob of little-endian float64 records
``(steps_completed, value, epochs, report time)``. A row per point would be the obvious layout, but
SQLite and its driver spend over a second handing a million rows to Python, whatever the index;
packed, the same million points are about 4,000 rows that numpy reads without a copy per point.
"""

from __future__ import annotations

import io
import math
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, Table, bindparam, func, select

from det_airflow.master import schema

GROUPS = ("training", "validation")
CHUNK_POINTS = 256
RECORD = np.dtype("<f8")
FIELDS = 4  # steps_completed, value, epochs (NaN when the report has none), report time (Unix s)
STEPS, VALUE, EPOCHS, TIME = range(FIELDS)
MAX_NAME = 256  # longer names are not charted (det_metric_chunks.name)
_CHUNK_BYTES = CHUNK_POINTS * FIELDS * RECORD.itemsize

Points = npt.NDArray[np.float64]  # shape (n, FIELDS)
Blob = bytes | memoryview


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number):
            return number
    return None


def _seconds(when: datetime) -> float:
    if when.tzinfo is None:  # SQLite keeps no zone; the master writes UTC
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def store(
    conn: Connection,
    trial_id: int,
    reports: Iterable[Mapping[Any, Any]],
    *,
    table: Table = schema.metric_chunks,
) -> None:
    """Append the numbers of reports (det_metrics rows: group, steps_completed, metrics, report_time)."""
    new: dict[tuple[str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
    for report in reports:
        group, steps, values, when = (
            report["group"],
            report["steps_completed"],
            report["metrics"],
            report["report_time"],
        )
        if group not in GROUPS or not isinstance(values, Mapping):
            continue
        epochs = _number(values.get("epochs"))
        at = _seconds(when)
        for name, raw in values.items():
            value = _number(raw)
            if value is not None and len(name) <= MAX_NAME:
                new[(group, name)].append((float(steps), value, math.nan if epochs is None else epochs, at))
    if not new:
        return
    latest = (
        select(func.max(table.c.id))
        .where(table.c.trial_id == trial_id, table.c.name.in_({name for _group, name in new}))
        .group_by(table.c.group, table.c.name)
    )
    open_chunks = {
        (row.group, row.name): (row.id, row.points)
        for row in conn.execute(
            select(table.c.id, table.c.group, table.c.name, table.c.points).where(table.c.id.in_(latest))
        )
        if len(row.points) < _CHUNK_BYTES
    }
    updates: list[dict[str, Any]] = []
    inserts: list[dict[str, Any]] = []
    for (group, name), records in new.items():
        data = np.array(records, dtype=RECORD).tobytes()
        if (group, name) in open_chunks:
            chunk_id, old = open_chunks[(group, name)]
            room = _CHUNK_BYTES - len(old)
            updates.append({"chunk_id": chunk_id, "new_points": bytes(old) + data[:room]})
            data = data[room:]
        inserts.extend(
            {"trial_id": trial_id, "group": group, "name": name, "points": data[i : i + _CHUNK_BYTES]}
            for i in range(0, len(data), _CHUNK_BYTES)
        )
    if updates:
        conn.execute(
            table.update().where(table.c.id == bindparam("chunk_id")).values(points=bindparam("new_points")),
            updates,
        )
    if inserts:
        conn.execute(table.insert(), inserts)


def read(conn: Connection, trial_ids: Sequence[int], group: str, name: str) -> dict[int, Points]:
    """Each trial's points of one metric, ordered by steps completed, then as reported."""
    blobs: dict[int, list[Blob]] = defaultdict(list)
    for trial_id, blob in _chunks(conn, trial_ids, group, name):
        blobs[trial_id].append(blob)
    series = {}
    for trial_id, parts in blobs.items():
        points = np.frombuffer(b"".join(parts), dtype=RECORD).reshape(-1, FIELDS)
        steps = points[:, STEPS]
        if len(steps) > 1 and not np.all(steps[1:] >= steps[:-1]):
            # A restarted run reports again from its checkpoint's step count on.
            points = points[np.argsort(steps, kind="stable")]
        series[trial_id] = points
    return series


def _chunks(conn: Connection, trial_ids: Sequence[int], group: str, name: str) -> Iterable[tuple[int, Blob]]:
    """(trial id, packed points) of the series' rows, by trial and then in stored order."""
    if conn.dialect.name == "postgresql" and conn.dialect.driver in _COPY_DRIVERS:
        return _copied_chunks(conn, trial_ids, group, name)
    table = schema.metric_chunks
    rows: list[tuple[int, Blob]] = []
    for start in range(0, len(trial_ids), 500):  # SQLite's limit on bound parameters
        result = conn.execute(
            select(table.c.trial_id, table.c.points)
            .where(
                table.c.trial_id.in_(trial_ids[start : start + 500]),
                table.c.group == group,
                table.c.name == name,
            )
            .order_by(table.c.trial_id, table.c.id)
        )
        # The driver's own rows: there is nothing to convert, and SQLAlchemy's would cost as much as
        # the read.
        try:
            rows.extend(result.cursor.fetchall())
        finally:
            result.close()
    return rows


_COPY_DRIVERS = ("psycopg2", "psycopg")
_COPY_HEADER = struct.Struct(">11sii")
_COPY_FIELDS = struct.Struct(">h")
_COPY_ROW = struct.Struct(">hiii")  # field count; trial_id's length and value; points' length


def _copied_chunks(
    conn: Connection, trial_ids: Sequence[int], group: str, name: str
) -> list[tuple[int, Blob]]:
    """The rows as ``COPY ... (FORMAT binary)`` sends them: PostgreSQL's drivers receive a query's
    ``bytea`` as hex text, twice the bytes to encode, send and decode; a binary copy is the bytes
    themselves, in one answer, and takes a third of the time for a whole experiment."""
    table = schema.metric_chunks
    sql = (
        f'COPY (SELECT trial_id, points FROM {table.name} WHERE trial_id = ANY(%(ids)s) AND "group" = '
        "%(group)s AND name = %(name)s ORDER BY trial_id, id) TO STDOUT (FORMAT binary)"
    )
    params = {"ids": list(trial_ids), "group": group, "name": name}
    driver = conn.connection.driver_connection
    cursor = driver.cursor()  # type: ignore[union-attr]
    try:
        if conn.dialect.driver == "psycopg2":
            out = io.BytesIO()
            cursor.copy_expert(cursor.mogrify(sql, params), out)
            data = out.getbuffer()
        else:
            with cursor.copy(sql, params) as copy:
                data = memoryview(b"".join(copy))
    finally:
        cursor.close()
    # The header: a signature, flags, and the length of an extension area to skip.
    pos = _COPY_HEADER.size + _COPY_HEADER.unpack_from(data)[2]
    rows: list[tuple[int, Blob]] = []
    while _COPY_FIELDS.unpack_from(data, pos)[0] != -1:  # -1 fields: the trailer
        _fields, _id_length, trial_id, length = _COPY_ROW.unpack_from(data, pos)
        pos += _COPY_ROW.size
        rows.append((trial_id, data[pos : pos + length]))
        pos += length
    return rows
