"""UI data: server time of an experiment's learning curves at 1,000 trials × 1,000 reports.

Builds an experiment of ``--trials`` trials, each with ``--reports`` validation reports (one metric
row per report and its numbers in ``det_metric_chunks``, as the master stores them), in a fresh
SQLite database (or ``--db``), then times the answer of ``GET /experiments/{id}/curves``
(:func:`det_airflow.master.curves.curves_json`, the route's work after the login check), each
``--repeat`` times:

- baseline: the same rows served without downsampling (every point of every trial);
- cold: downsampled (LTTB to 400 points, best 10 trials whole), nothing kept from earlier answers;
- warm: downsampled, answered again while no metric row was added (the UI's 5 s refresh);
- live: ``--changed`` trials store one more report each, then the answer (a refresh while running).

Printed: the median wall time (and the fastest run), this process's CPU time, where the cold time
goes (reading the points, LTTB, JSON encoding), the answer sizes, and how long the upgrade to schema
version 5 takes to backfill the numbers of that many stored metric rows (once).

With ``--postgres``, the same again on a throwaway PostgreSQL server of this machine (started as the
integration tests start theirs), then the ratios of its wall times to SQLite's of the same run.

    .venv/bin/python benchmarks/ui_data.py [--trials 1000] [--reports 1000] [--repeat 5] [--db URL]
        [--postgres]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pydantic_core  # noqa: E402
from sqlalchemy import select  # noqa: E402

from det_airflow._pgcluster import PgCluster, find_bindir  # noqa: E402
from det_airflow.master import curves, metric_points, migrations, schema  # noqa: E402
from det_airflow.master.db import Database  # noqa: E402
from det_airflow.master.downsample import lttb_many  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = {
    "name": "bench",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": 1000, "max_length": {"batches": 1000}},
}


def build(db: Database, trials: int, reports: int) -> int:
    rng = random.Random(1)
    with db.begin() as conn:
        exp_id = int(
            conn.execute(
                schema.experiments.insert().values(
                    name="bench",
                    owner="admin",
                    labels=[],
                    state="ACTIVE",
                    config=CONFIG,
                    config_yaml="",
                    resource_pool="default_pool",
                    searcher_name="random",
                    search_done=False,
                    progress=0.0,
                    start_time=START,
                    archived=False,
                    dag_id="det_exp_1",
                )
            ).inserted_primary_key[0]
        )
        for i in range(trials):
            lr = 10 ** rng.uniform(-4, -1)
            final = 0.05 + rng.random()
            trial_id = int(
                conn.execute(
                    schema.trials.insert().values(
                        experiment_id=exp_id,
                        request_id=i,
                        slot=i,
                        state="COMPLETED",
                        hparams={"lr": lr, "layers": rng.randint(1, 4)},
                        trial_seed=i,
                        start_time=START,
                        best_validation=final,
                        best_validation_steps=reports * 10,
                        summary={
                            "validation": {"steps_completed": reports * 10, "loss": final, "accuracy": 0.9}
                        },
                    )
                ).inserted_primary_key[0]
            )
            rows = [
                {
                    "trial_id": trial_id,
                    "group": "validation",
                    "steps_completed": (k + 1) * 10,
                    "metrics": {"loss": final + math.exp(-k / 150) + rng.gauss(0, 0.02), "accuracy": 0.9},
                    "report_time": START + timedelta(seconds=k * 3 + rng.random()),
                    "trial_run_id": 1,
                }
                for k in range(reports)
            ]
            conn.execute(schema.metrics.insert(), rows)
            metric_points.store(conn, trial_id, rows)
    return exp_id


def report_and_answer(db: Database, exp_id: int, query: curves.CurveQuery, changed: int) -> bytes:
    """A live refresh: ``changed`` trials store one more report (as the master does), then the answer."""
    with db.begin() as conn:
        rows = conn.execute(
            select(schema.trials).where(schema.trials.c.experiment_id == exp_id).limit(changed)
        ).all()
        for trial in rows:
            steps = trial.summary["validation"]["steps_completed"] + 10
            row = {
                "trial_id": trial.id,
                "group": "validation",
                "steps_completed": steps,
                "metrics": {"loss": trial.best_validation, "accuracy": 0.9},
                "report_time": START + timedelta(seconds=steps),
                "trial_run_id": 1,
            }
            conn.execute(schema.metrics.insert(), [row])
            metric_points.store(conn, trial.id, [row])
            summary = {"validation": {"steps_completed": steps, "loss": trial.best_validation}}
            conn.execute(schema.trials.update().where(schema.trials.c.id == trial.id).values(summary=summary))
    with db.read() as conn:
        exp = conn.execute(select(schema.experiments).where(schema.experiments.c.id == exp_id)).one()
        return curves.curves_json(conn, exp, query)


FASTEST: dict[str, float] = {}
CPU: dict[str, float] = {}


def median_ms(fn: Callable[[], object], repeat: int, name: str = "") -> float:
    """The median wall time of ``repeat`` runs in ms. Also kept under ``name``: the fastest run, and
    the median CPU time of this process (the cost without waiting for a shared machine's cores;
    SQLite works inside the process, PostgreSQL's server is not counted)."""
    times, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    FASTEST[name] = min(times) * 1000
    CPU[name] = statistics.median(cpu) * 1000
    return statistics.median(times) * 1000


def measure(url: str, args: argparse.Namespace) -> dict[str, float]:
    """Build the experiment in the database at ``url``, print its figures, and answer the medians."""
    FASTEST.clear()
    CPU.clear()
    db = Database(url)
    db.migrate()
    t0 = time.perf_counter()
    exp_id = build(db, args.trials, args.reports)
    print(f"built {args.trials} trials × {args.reports} reports in {time.perf_counter() - t0:.1f} s")
    query = curves.CurveQuery(exp_id, "validation", None, "batches", 400)
    with db.read() as conn:
        exp = conn.execute(select(schema.experiments).where(schema.experiments.c.id == exp_id)).one()

        def answer(downsample: bool, cold: bool, q: curves.CurveQuery = query) -> bytes:
            if cold:
                curves.fragments.clear()
            return curves.curves_json(conn, exp, q, downsample=downsample)

        full = answer(downsample=False, cold=True)
        thin = answer(downsample=True, cold=True)
        baseline = median_ms(lambda: answer(False, True), args.repeat, "baseline")
        cold = median_ms(lambda: answer(True, True), args.repeat, "cold")
        warm = median_ms(lambda: answer(True, False), args.repeat, "warm")
        time_q = curves.CurveQuery(exp_id, "validation", None, "time", 400)
        cold_time = median_ms(lambda: answer(True, True, time_q), args.repeat, "cold_time")
        trial_rows = list(conn.execute(select(schema.trials).where(schema.trials.c.experiment_id == exp_id)))
        median_ms(lambda: curves._series(conn, trial_rows, query, "loss"), args.repeat, "sql")
        sql_wall = statistics.median(
            [_wall(lambda: curves._series(conn, trial_rows, query, "loss")) for _ in range(args.repeat)]
        )
        series, _ = curves._series(conn, trial_rows, query, "loss")
        answer(True, True)  # what the live refreshes below start from
        print(f"database: {conn.dialect.name} ({conn.dialect.driver})")
    items = list(series.values())
    median_ms(lambda: lttb_many(items, 400), args.repeat, "lttb")
    served = lttb_many(items, 400)
    median_ms(
        lambda: [pydantic_core.to_json({"x": x.tolist(), "y": y.tolist()}) for x, y in served],
        args.repeat,
        "json",
    )
    answer_dict = json.loads(thin)
    drawn = sum(len(s["x"]) for s in answer_dict["series"])
    total = sum(s["points"] for s in answer_dict["series"])
    live = median_ms(lambda: report_and_answer(db, exp_id, query, args.changed), args.repeat, "live")
    t0, c0 = time.perf_counter(), time.process_time()
    with db.begin() as conn:
        migrations.backfill_metric_chunks(conn)
    backfill = (time.perf_counter() - t0, time.process_time() - c0)
    db.engine.dispose()

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.repeat} runs each")
    print(f"points: {total:,} stored, {drawn:,} served downsampled")
    print(f"answer size: {len(full) / 1e6:.1f} MB whole, {len(thin) / 1e6:.1f} MB downsampled")
    f, c = FASTEST, CPU
    print("                                  wall median (fastest)   CPU of this process")
    print(
        f"baseline, every point (cold):      {baseline:7.0f} ms ({f['baseline']:.0f})   {c['baseline']:7.0f} ms"
    )
    print(f"downsampled, cold, x=batches:      {cold:7.0f} ms ({f['cold']:.0f})   {c['cold']:7.0f} ms")
    print(
        f"downsampled, cold, x=time:         {cold_time:7.0f} ms ({f['cold_time']:.0f})   {c['cold_time']:7.0f} ms"
    )
    print(f"downsampled, warm (no new rows):   {warm:7.1f} ms ({f['warm']:.1f})   {c['warm']:7.1f} ms")
    print(
        f"{args.changed} trials reported once more:     {live:7.0f} ms ({f['live']:.0f})   {c['live']:7.0f} ms  (row writes included)"
    )
    print(
        f"  of cold: reading the points {sql_wall * 1000:.0f} ms wall, {CPU['sql']:.0f} ms CPU; "
        f"LTTB {CPU['lttb']:.0f} ms, JSON {CPU['json']:.0f} ms (CPU)"
    )
    print(
        f"upgrade to schema 5, backfill of {total:,} stored points: {backfill[0]:.1f} s wall, "
        f"{backfill[1]:.1f} s CPU"
    )
    return {"baseline": baseline, "cold": cold, "cold_time": cold_time, "warm": warm, "live": live}


def _wall(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", help="SQLAlchemy URL of an empty database (default: a new SQLite file)")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="after SQLite, the same on a throwaway local PostgreSQL server (as the integration tests "
        "start one), and the ratios of its times to SQLite's",
    )
    parser.add_argument("--changed", type=int, default=20, help="trials reporting between two refreshes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        sqlite = measure(args.db or f"sqlite:///{tmp}/bench.db", args)
    if not args.postgres:
        return
    bindir = find_bindir()
    if bindir is None:
        sys.exit("--postgres: no PostgreSQL server binaries (apt-get install postgresql)")
    cluster = PgCluster.start_throwaway(bindir)
    try:
        print()
        postgres = measure(cluster.url, args)
    finally:
        cluster.stop()
    print("\nPostgreSQL / SQLite, wall medians of this run:")
    for name, label in [
        ("cold", "downsampled, cold, x=batches"),
        ("cold_time", "downsampled, cold, x=time"),
        ("baseline", "baseline, every point (cold)"),
        ("warm", "downsampled, warm"),
        ("live", f"{args.changed} trials reported once more"),
    ]:
        print(
            f"  {label + ':':34s} {postgres[name]:6.0f} / {sqlite[name]:6.0f} ms = {postgres[name] / sqlite[name]:.2f}×"
        )


if __name__ == "__main__":
    main()
