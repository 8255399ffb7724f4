"""A small experiment stored as metric rows only, as the master kept metrics before version 5 of its
tables, and the learning curves it answered for it then (``curves_before.json``, written by the
curves code of that version from these same rows)."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from det_airflow.master import schema

START = datetime(2026, 1, 1, tzinfo=UTC)
TRIALS = 12  # two more than the best trials kept whole, so that two series are downsampled
REPORTS = 20
POINTS = 10
CONFIG = {
    "name": "sample",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": TRIALS, "max_length": {"batches": 200}},
}
# (group, metric or None for the default, x axis)
QUERIES = [
    ("validation", None, "batches"),
    ("validation", None, "time"),
    ("validation", "accuracy", "batches"),
    ("training", "loss", "batches"),
    ("training", "loss", "time"),
]
BEFORE = Path(__file__).with_name("curves_before.json")


def expected() -> dict[str, Any]:
    """The answers before version 5, by ``group:metric:x``."""
    return dict(json.loads(BEFORE.read_text()))


def build(conn: Connection) -> int:
    """The experiment's rows; returns its id."""
    rng = random.Random(5)
    exp_id = int(
        conn.execute(
            schema.experiments.insert().values(
                name="sample",
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
            )
        ).inserted_primary_key[0]  # type: ignore[index]
    )
    for i in range(TRIALS):
        rows: list[dict[str, Any]] = []
        final = 0.1 + rng.random()
        restarted = i % 4 == 1  # a second run reports again from step 100 on
        runs = [(1, range(1, REPORTS + 1))] + ([(2, range(10, REPORTS + 1))] if restarted else [])
        for run, reports in runs:
            for k in reports:
                steps = k * 10
                loss: Any = final + math.exp(-k / 5) + rng.gauss(0, 0.01) + run / 100
                if (i, k) == (3, 7):
                    loss = "diverged"  # not a number: no point
                values = {"loss": loss, "accuracy": round(rng.random(), 3)}
                if (i, k) == (5, 9):
                    del values["loss"]
                for group in ("training", "validation"):
                    rows.append(
                        {
                            "group": group,
                            "steps_completed": steps,
                            "metrics": values if group == "validation" else {"loss": 2 * final / k},
                            # Whole milliseconds: stored exactly whatever the database.
                            "report_time": START + timedelta(seconds=60 * i + 3 * k + run, milliseconds=k),
                            "trial_run_id": run,
                        }
                    )
        best = min(r["metrics"]["loss"] for r in rows if isinstance(r["metrics"].get("loss"), float))
        trial_id = int(
            conn.execute(
                schema.trials.insert().values(
                    experiment_id=exp_id,
                    request_id=i,
                    slot=i,
                    state="COMPLETED" if i % 3 else "RUNNING",
                    hparams={"lr": round(10 ** rng.uniform(-4, -1), 6), "layers": rng.randint(1, 4)},
                    trial_seed=i,
                    start_time=START + timedelta(seconds=60 * i),
                    run_id=2 if restarted else 1,
                    best_validation=best,
                    summary={
                        group: {"steps_completed": REPORTS * 10, **last["metrics"]}
                        for group in ("training", "validation")
                        for last in [next(r for r in reversed(rows) if r["group"] == group)]
                    },
                )
            ).inserted_primary_key[0]  # type: ignore[index]
        )
        conn.execute(schema.metrics.insert(), [{"trial_id": trial_id, **r} for r in rows])
    return exp_id
