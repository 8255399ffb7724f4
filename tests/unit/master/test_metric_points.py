"""Metric values kept as numbers for charts: written with each report, backfilled by the migration,
and read by the learning curves, which answer as they did when they parsed every row's JSON."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from det_airflow.master import curves, metric_points, migrations, schema
from det_airflow.master.db import Database
from tests.unit.master import curves_sample
from tests.unit.master.people_app import NOW, People
from tests.unit.master.test_migrations import build_v1, sqlite_url


def unmanaged_run(people: People) -> dict[str, Any]:
    body = {"config": {"name": "notebook-run"}, "hparams": {"lr": 0.1}}
    response = people.call("alice", "POST", "/experiments/unmanaged", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def post_reports(people: People, run: dict[str, Any], reports: list[dict[str, Any]]) -> None:
    """Reports sent the way training code sends them: to the trial's runtime route, with its token."""
    headers = {"Authorization": f"Bearer {run['token']}"}
    path = f"/runtime/trials/{run['trial']['id']}/metrics"
    answer = people.call(None, "POST", path, headers=headers, json={"reports": reports})
    assert answer.status_code == 200, answer.text


def points_of(db: Database, trial_id: int, group: str, name: str) -> list[list[float]]:
    with db.read() as conn:
        found = metric_points.read(conn, [trial_id], group, name)
    return found[trial_id].tolist() if trial_id in found else []


def at(report_time: Any) -> float:
    return float(report_time.timestamp())


def test_a_report_stores_its_numbers_in_the_same_request(people: People) -> None:
    run = unmanaged_run(people)
    trial_id = run["trial"]["id"]
    when = NOW + timedelta(seconds=30)
    post_reports(
        people,
        run,
        [
            {
                "group": "training",
                "steps_completed": 10,
                "metrics": {"loss": 0.5, "epochs": 1, "batches": 10, "note": "warming up"},
                "report_time": when.isoformat(),
            },
            {"group": "validation", "steps_completed": 10, "metrics": {"loss": 0.4, "accuracy": 0.75}},
        ],
    )

    assert points_of(people.db, trial_id, "training", "loss") == [[10, 0.5, 1, at(when)]]
    assert points_of(people.db, trial_id, "training", "epochs") == [[10, 1, 1, at(when)]]
    assert points_of(people.db, trial_id, "training", "note") == []
    (validation,) = points_of(people.db, trial_id, "validation", "accuracy")
    assert validation[:2] == [10, 0.75] and math.isnan(validation[metric_points.EPOCHS])

    answer = people.call(
        "alice", "GET", f"/experiments/{run['experiment']['id']}/curves?group=training&metric=loss"
    )
    (series,) = answer.json()["series"]
    assert (series["trial_id"], series["x"], series["y"], series["points"]) == (trial_id, [10], [0.5], 1)


def test_a_retried_report_is_stored_once(people: People) -> None:
    run = unmanaged_run(people)
    report = {"group": "validation", "steps_completed": 10, "metrics": {"loss": 0.4}}
    post_reports(people, run, [report])
    post_reports(people, run, [report])
    assert [p[:2] for p in points_of(people.db, run["trial"]["id"], "validation", "loss")] == [[10, 0.4]]


def test_only_finite_numbers_of_training_and_validation_are_kept(people: People) -> None:
    trial_id = people.add_trial(people.add_experiment(owner="alice"), state="RUNNING")
    values = {
        "loss": 0.25,
        "count": 7,
        "nan": math.nan,
        "inf": math.inf,
        "minus_inf": -math.inf,
        "flag": True,
        "text": "0.5",
        "none": None,
        "nested": {"a": 1.0},
        "list": [1.0],
        "x" * (metric_points.MAX_NAME + 1): 1.0,
    }
    reports = [
        {"group": group, "steps_completed": 5, "metrics": values, "report_time": NOW}
        for group in ("training", "validation", "inference")
    ]
    with people.db.begin() as conn:
        metric_points.store(conn, trial_id, reports)
        names = conn.execute(
            select(schema.metric_chunks.c.group, schema.metric_chunks.c.name).order_by("group", "name")
        ).all()
    assert [tuple(n) for n in names] == [
        ("training", "count"),
        ("training", "loss"),
        ("validation", "count"),
        ("validation", "loss"),
    ]
    assert points_of(people.db, trial_id, "validation", "count")[0][:2] == [5, 7]


def test_a_long_series_spans_chunks_and_reads_back_in_step_order(people: People) -> None:
    trial_id = people.add_trial(people.add_experiment(owner="alice"), state="RUNNING")
    first_run = [(k * 10, float(k)) for k in range(1, 401)]
    # A restarted run reports again from step 3,000 on: its points follow the first run's at each step.
    second_run = [(k * 10, -float(k)) for k in range(300, 501)]
    with people.db.begin() as conn:
        for points in (first_run[:150], first_run[150:], second_run):
            metric_points.store(
                conn,
                trial_id,
                [
                    {"group": "validation", "steps_completed": s, "metrics": {"loss": v}, "report_time": NOW}
                    for s, v in points
                ],
            )
        chunks = conn.execute(select(func.count()).select_from(schema.metric_chunks)).scalar_one()
    stored = [(int(s), v) for s, v, _e, _t in points_of(people.db, trial_id, "validation", "loss")]
    expected = sorted(first_run + second_run, key=lambda p: p[0])  # stable: the first run first
    assert stored == expected
    assert chunks == math.ceil(len(expected) / metric_points.CHUNK_POINTS)


def test_epochs_axis_uses_the_epochs_each_report_carries(people: People) -> None:
    run = unmanaged_run(people)
    post_reports(
        people,
        run,
        [
            {"group": "validation", "steps_completed": 50, "metrics": {"loss": 0.9, "epochs": 0.5}},
            {"group": "validation", "steps_completed": 100, "metrics": {"loss": 0.7}},
            {"group": "validation", "steps_completed": 200, "metrics": {"loss": 0.5, "epochs": 2}},
        ],
    )
    answer = people.call("alice", "GET", f"/experiments/{run['experiment']['id']}/curves?x=epochs")
    assert answer.status_code == 200, answer.text
    (series,) = answer.json()["series"]
    assert (series["x"], series["y"], series["points"]) == ([0.5, 2.0], [0.9, 0.5], 2)


def test_deleting_an_experiment_removes_its_points(people: People) -> None:
    run = unmanaged_run(people)
    post_reports(people, run, [{"group": "validation", "steps_completed": 10, "metrics": {"loss": 0.4}}])
    experiment_id = run["experiment"]["id"]
    assert people.call("alice", "POST", f"/experiments/{experiment_id}/kill").status_code == 200
    assert people.call("alice", "DELETE", f"/experiments/{experiment_id}").status_code == 200
    with people.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(schema.metric_chunks)).scalar_one() == 0


# --- the migration to version 5 ---


def chunk_contents(db: Database) -> list[tuple[int, str, str, bytes]]:
    table = schema.metric_chunks
    with db.read() as conn:
        rows = conn.execute(
            select(table.c.trial_id, table.c.group, table.c.name, table.c.points).order_by(table.c.id)
        ).all()
    return [(r.trial_id, r.group, r.name, bytes(r.points)) for r in rows]


def test_upgrading_backfills_the_numbers_of_every_stored_report(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    build_v1(db.engine)  # six trials, each with one training report {"loss": 0.5}

    assert db.migrate() == (1, schema.SCHEMA_VERSION)

    with db.read() as conn:
        trial_ids = list(conn.execute(select(schema.trials.c.id).order_by(schema.trials.c.id)).scalars())
        found = metric_points.read(conn, trial_ids, "training", "loss")
    assert sorted(found) == trial_ids
    assert {tuple(p[:2]) for points in found.values() for p in points.tolist()} == {(10, 0.5)}


def test_the_backfill_can_run_again_and_finds_the_same(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    db.migrate()
    with db.begin() as conn:
        curves_sample.build(conn)
        assert migrations.backfill_metric_chunks(conn) == curves_sample.TRIALS
    first = chunk_contents(db)
    with db.begin() as conn:
        assert migrations.backfill_metric_chunks(conn) == curves_sample.TRIALS
    assert chunk_contents(db) == first
    assert len(first) == curves_sample.TRIALS * 3  # training loss, validation loss and accuracy
    assert db.migrate() == (schema.SCHEMA_VERSION, schema.SCHEMA_VERSION)
    assert chunk_contents(db) == first


# --- learning curves read from the numbers answer as they did from the JSON ---


def answer_of(tmp_path: Path, group: str, metric: str | None, x: str) -> dict[str, Any]:
    """The curves of the sample experiment, its rows stored before version 5 and then migrated."""
    db = Database(sqlite_url(tmp_path))
    db.migrate()
    with db.begin() as conn:
        experiment_id = curves_sample.build(conn)
        migrations.backfill_metric_chunks(conn)
    curves.fragments.clear()
    with db.read() as conn:
        exp = conn.execute(select(schema.experiments).where(schema.experiments.c.id == experiment_id)).one()
        query = curves.CurveQuery(experiment_id, group, metric, x, curves_sample.POINTS)  # type: ignore[arg-type]
        return dict(json.loads(curves.curves_json(conn, exp, query)))


@pytest.mark.parametrize(("group", "metric", "x"), [q for q in curves_sample.QUERIES if q[2] == "batches"])
def test_curves_by_batches_answer_exactly_as_before(
    tmp_path: Path, group: str, metric: str | None, x: str
) -> None:
    assert answer_of(tmp_path, group, metric, x) == curves_sample.expected()[f"{group}:{metric or ''}:{x}"]


@pytest.mark.parametrize(("group", "metric", "x"), [q for q in curves_sample.QUERIES if q[2] == "time"])
def test_curves_by_time_answer_as_before_to_the_millisecond(
    tmp_path: Path, group: str, metric: str | None, x: str
) -> None:
    answer = answer_of(tmp_path, group, metric, x)
    before = curves_sample.expected()[f"{group}:{metric or ''}:{x}"]
    # Seconds came from SQLite's Julian days before (good to about 50 µs); now from the report time.
    assert [s["x"] for s in answer["series"]] == [pytest.approx(s["x"], abs=1e-4) for s in before["series"]]
    strip = [{k: v for k, v in s.items() if k != "x"} for s in answer["series"]]
    assert strip == [{k: v for k, v in s.items() if k != "x"} for s in before["series"]]
    assert {k: v for k, v in answer.items() if k != "series"} == {
        k: v for k, v in before.items() if k != "series"
    }
