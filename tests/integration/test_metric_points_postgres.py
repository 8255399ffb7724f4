"""The learning curves' points read from PostgreSQL (a binary COPY, not a query) are the points
SQLite's query gives, with either of PostgreSQL's drivers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from det_airflow._pgcluster import PgCluster, find_bindir
from det_airflow.master import metric_points, schema
from det_airflow.master.db import Database

pytestmark = pytest.mark.integration

START = datetime(2026, 1, 1, tzinfo=UTC)
ODD_NAME = 'it\'s \\ "odd"'


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    bindir = find_bindir()
    if bindir is None:
        pytest.fail("PostgreSQL server binaries not found: apt-get install postgresql")
    cluster = PgCluster.start_throwaway(bindir)
    try:
        yield cluster.url
    finally:
        cluster.stop()


def reports(steps: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "group": "validation",
            "steps_completed": s,
            "metrics": {"loss": 1 / (k + 1), ODD_NAME: float(k), "epochs": k / 100 if k % 2 else math.nan},
            "report_time": START + timedelta(seconds=k),
        }
        for k, s in enumerate(steps)
    ]


def fill(db: Database) -> list[int]:
    """Three trials: 700 reports stored in three calls (chunks filled up and appended to), a run
    restarted from step 100 (steps out of order), and one without reports."""
    db.migrate()
    with db.begin() as conn:
        exp_id = conn.execute(
            schema.experiments.insert().values(
                name="e", owner="admin", labels=[], state="ACTIVE", config={}, config_yaml="",
                resource_pool="default_pool", searcher_name="random", search_done=False,
                progress=0.0, start_time=START, archived=False, dag_id="det_exp_1",
            )
        ).inserted_primary_key[0]  # fmt: skip
        ids = []
        for i in range(3):
            ids.append(
                conn.execute(
                    schema.trials.insert().values(
                        experiment_id=exp_id,
                        request_id=i,
                        slot=i,
                        state="ACTIVE",
                        hparams={},
                        trial_seed=i,
                        start_time=START,
                        summary={},
                    )
                ).inserted_primary_key[0]  # fmt: skip
            )
        steps = list(range(10, 7010, 10))
        for part in (steps[:100], steps[100:300], steps[300:]):
            metric_points.store(conn, ids[0], reports(part))
        metric_points.store(conn, ids[1], reports([10, 20, 30, 40, 10, 20, 30, 40, 50]))
    return ids


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
@pytest.mark.parametrize("name", ["loss", ODD_NAME, "never reported"])
def test_postgresql_reads_what_sqlite_reads(pg_url: str, tmp_path: Path, driver: str, name: str) -> None:
    sqlite = Database(f"sqlite:///{tmp_path}/m.db")
    postgres = Database(pg_url.replace("postgresql://", f"postgresql+{driver}://"))
    with postgres.begin() as conn:
        schema.metadata.drop_all(conn)
        conn.exec_driver_sql("DROP TABLE IF EXISTS det_settings")
    ids = fill(sqlite)
    assert fill(postgres) == ids
    with sqlite.read() as conn:
        expected = metric_points.read(conn, ids, "validation", name)
    with postgres.read() as conn:
        got = metric_points.read(conn, ids, "validation", name)
        assert metric_points.read(conn, [], "validation", name) == {}
    assert sorted(got) == sorted(expected)
    for trial_id, points in expected.items():
        assert got[trial_id].tobytes() == points.tobytes()
    if name == "loss":
        assert len(got[ids[0]]) == 700
        assert got[ids[1]][:, metric_points.STEPS].tolist() == [10, 10, 20, 20, 30, 30, 40, 40, 50]
    postgres.engine.dispose()
