"""The web UI's read routes: Airflow ids → experiment and trial, learning curves, filtered logs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from det_airflow.master import curves, metric_points, schema
from tests.unit.master.people_app import NOW, People


def report(
    people: People, trial_id: int, steps: int, values: dict[str, Any], group: str = "validation"
) -> None:
    """Store a report the way the master does: the metric row and the trial's latest summary together."""
    trial = people.trial(trial_id)
    summary = {**(trial.summary or {}), group: {"steps_completed": steps, **values}}
    row = {
        "trial_id": trial_id,
        "group": group,
        "steps_completed": steps,
        "metrics": values,
        "report_time": NOW + timedelta(seconds=steps),
        "trial_run_id": 1,
    }
    with people.db.begin() as conn:
        conn.execute(schema.metrics.insert(), [row])
        metric_points.store(conn, trial_id, [row])
        best = values.get("loss") if group == "validation" else None
        changes: dict[str, Any] = {"summary": summary}
        if isinstance(best, float) and (trial.best_validation is None or best < trial.best_validation):
            changes["best_validation"] = best
        conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(**changes))


def new_trial(people: People, experiment_id: int, *, slot: int | None = None, hparams: Any = None) -> int:
    trial_id = people.add_trial(experiment_id, state="RUNNING")
    with people.db.begin() as conn:
        # add_trial stores one bare report; these tests write their own.
        conn.execute(schema.metrics.delete().where(schema.metrics.c.trial_id == trial_id))
        conn.execute(
            schema.trials.update()
            .where(schema.trials.c.id == trial_id)
            .values(slot=slot, start_time=NOW, hparams=hparams or {"lr": 0.1})
        )
    return trial_id


def set_dag(people: People, experiment_id: int, dag_id: str, run_id: str | None) -> None:
    with people.db.begin() as conn:
        conn.execute(
            schema.experiments.update()
            .where(schema.experiments.c.id == experiment_id)
            .values(dag_id=dag_id, dag_run_id=run_id)
        )


# --- /ui/resolve ---


def test_a_dag_run_and_map_index_resolve_to_the_experiment_and_its_trial(people: People) -> None:
    e = people.add_experiment(owner="alice")
    set_dag(people, e, "det_mnist", "manual__2026-01-01")
    first = new_trial(people, e, slot=0)
    new_trial(people, e, slot=1)
    # A slot runs another trial once its first one ends: the map index now stands for the newer one.
    later = new_trial(people, e, slot=0)
    answer = people.call(
        "viewer", "GET", "/ui/resolve?dag_id=det_mnist&run_id=manual__2026-01-01&map_index=0"
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"experiment_id": e, "trial_id": later}
    assert later != first
    answer = people.call("viewer", "GET", "/ui/resolve?dag_id=det_mnist")
    assert answer.json() == {"experiment_id": e, "trial_id": None}


def test_an_experiments_own_dag_resolves_before_its_run_registered(people: People) -> None:
    e = people.add_experiment(owner="alice")
    set_dag(people, e, f"det_exp_{e}", None)
    answer = people.call("viewer", "GET", f"/ui/resolve?dag_id=det_exp_{e}&run_id=manual__x")
    assert answer.json() == {"experiment_id": e, "trial_id": None}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("dag_id=other_dag", "no experiment runs as DAG 'other_dag'"),
        ("dag_id=det_1&run_id=nope", "no experiment runs as DAG 'det_1' run 'nope'"),
        ("dag_id=det_1&map_index=7", "experiment 1 has no trial at map index 7 (yet)"),
    ],
)
def test_unknown_dags_runs_and_map_indexes_are_404_with_what_is_missing(
    people: People, query: str, message: str
) -> None:
    people.add_experiment(owner="alice")
    answer = people.call("viewer", "GET", f"/ui/resolve?{query}")
    assert answer.status_code == 404
    assert answer.json()["detail"] == message


def test_resolving_needs_a_login_and_read_access_to_the_dag(people: People) -> None:
    people.add_experiment(owner="alice")
    second = people.add_experiment(owner="alice")
    assert people.call(None, "GET", "/ui/resolve?dag_id=det_1").status_code == 401
    assert people.call("carol", "GET", "/ui/resolve?dag_id=det_1").json() == {
        "experiment_id": 1,
        "trial_id": None,
    }
    denied = people.call("carol", "GET", f"/ui/resolve?dag_id=det_{second}")
    assert denied.status_code == 403
    assert f"needs read access to DAG 'det_{second}'" in denied.json()["detail"]


# --- /experiments/{id}/curves ---


def curves_of(people: People, experiment_id: int, query: str = "", user: str = "viewer") -> dict:
    answer = people.call(user, "GET", f"/experiments/{experiment_id}/curves{query}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_every_trial_gets_a_series_and_only_the_best_keep_every_point(people: People) -> None:
    e = people.add_experiment(owner="alice")
    trials = [new_trial(people, e, hparams={"lr": 0.1 * (i + 1)}) for i in range(12)]
    for rank, trial_id in enumerate(trials):
        for k in range(1, 101):
            report(people, trial_id, k * 10, {"loss": 1.0 + rank + 1 / k, "accuracy": 0.5})
    silent = new_trial(people, e)  # no report yet: no series

    answer = curves_of(people, e, "?points=20")

    assert answer["group"] == "validation" and answer["metric"] == "loss" and answer["x"] == "batches"
    assert answer["metrics"] == {"training": [], "validation": ["accuracy", "loss"]}
    assert answer["smaller_is_better"] is True
    assert answer["best_trial_ids"] == trials[:10]
    by_trial = {s["trial_id"]: s for s in answer["series"]}
    assert sorted(by_trial) == trials and silent not in by_trial
    for trial_id in trials[:10]:
        assert by_trial[trial_id]["points"] == 100
        assert by_trial[trial_id]["x"] == [k * 10 for k in range(1, 101)]
    for trial_id in trials[10:]:
        series = by_trial[trial_id]
        assert series["points"] == 100 and len(series["x"]) == len(series["y"]) == 20
        assert (series["x"][0], series["x"][-1]) == (10, 1000)
    assert by_trial[trials[11]]["hparams"] == {"lr": pytest.approx(1.2)}
    assert by_trial[trials[11]]["state"] == "RUNNING"


def test_keep_best_false_downsamples_the_best_trials_too(people: People) -> None:
    """Comparing experiments draws every series at one resolution: no trial comes whole."""
    e = people.add_experiment(owner="alice")
    trials = [new_trial(people, e) for _ in range(3)]
    for rank, trial_id in enumerate(trials):
        for k in range(1, 101):
            report(people, trial_id, k * 10, {"loss": 1.0 + rank + 1 / k})

    whole = curves_of(people, e, "?points=20")
    thinned = curves_of(people, e, "?points=20&keep_best=false")

    assert [len(s["x"]) for s in whole["series"]] == [100, 100, 100]
    assert [len(s["x"]) for s in thinned["series"]] == [20, 20, 20]
    assert [s["points"] for s in thinned["series"]] == [100, 100, 100]
    assert thinned["best_trial_ids"] == trials
    # The answer asked for first is not served from the other's cache.
    assert [len(s["x"]) for s in curves_of(people, e, "?points=20")["series"]] == [100, 100, 100]


def test_another_metric_group_and_time_axis(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = new_trial(people, e)
    for steps in (5, 10, 15):
        report(people, t, steps, {"train_loss": 2.0 / steps, "note": "text"}, group="training")
    answer = curves_of(people, e, "?group=training&x=time")
    assert answer["metric"] == "train_loss" and answer["metrics"]["training"] == ["train_loss"]
    (series,) = answer["series"]
    # Seconds since the trial started (report times are NOW + steps seconds in this test).
    assert series["x"] == [5.0, 10.0, 15.0]
    assert series["y"] == pytest.approx([0.4, 0.2, 2 / 15])


def test_reports_without_a_number_for_the_metric_are_left_out(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = new_trial(people, e)
    report(people, t, 10, {"loss": 0.9})
    report(people, t, 20, {"loss": "nan-ish"})
    report(people, t, 30, {"accuracy": 0.3})
    report(people, t, 40, {"loss": 0.5})
    (series,) = curves_of(people, e)["series"]
    assert (series["x"], series["y"], series["points"]) == ([10, 40], [0.9, 0.5], 2)


def test_a_new_report_shows_up_in_the_next_answer(people: People) -> None:
    e = people.add_experiment(owner="alice")
    first, second = new_trial(people, e), new_trial(people, e)
    report(people, first, 10, {"loss": 0.9})
    report(people, second, 10, {"loss": 0.8})
    assert [s["x"] for s in curves_of(people, e)["series"]] == [[10], [10]]
    report(people, second, 20, {"loss": 0.7})
    answer = curves_of(people, e)
    assert [s["x"] for s in answer["series"]] == [[10], [10, 20]]
    assert [s["y"] for s in answer["series"]] == [[0.9], [0.8, 0.7]]
    # The same answer again, now from what the master kept.
    assert curves_of(people, e) == answer


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("?metric=acc", 404, "experiment 1 has no validation metric 'acc' (reported: loss)"),
        ("?group=test", 422, "Input should be 'training' or 'validation'"),
        ("?x=steps", 422, "Input should be 'batches', 'time' or 'epochs'"),
        ("?points=9", 422, "Input should be greater than or equal to 10"),
        ("?points=5001", 422, "Input should be less than or equal to 5000"),
    ],
)
def test_bad_curve_queries_say_what_is_wrong(people: People, query: str, status: int, message: str) -> None:
    e = people.add_experiment(owner="alice")
    report(people, new_trial(people, e), 10, {"loss": 0.9})
    answer = people.call("viewer", "GET", f"/experiments/{e}/curves{query}")
    assert answer.status_code == status
    assert message in answer.text


def test_curves_need_a_login_and_read_access(people: People) -> None:
    people.add_experiment(owner="alice")
    second = people.add_experiment(owner="alice")
    assert people.call(None, "GET", f"/experiments/{second}/curves").status_code == 401
    assert people.call("carol", "GET", f"/experiments/{second}/curves").status_code == 403
    assert people.call("viewer", "GET", "/experiments/99/curves").status_code == 404


def test_an_experiment_without_reports_has_no_series(people: People) -> None:
    e = people.add_experiment(owner="alice")
    new_trial(people, e)
    answer = curves_of(people, e)
    assert (answer["metric"], answer["series"], answer["best_trial_ids"]) == ("loss", [], [])


def test_the_cache_keeps_a_bounded_number_of_views(people: People) -> None:
    e = people.add_experiment(owner="alice")
    report(people, new_trial(people, e), 10, {"loss": 0.9})
    for points in range(10, 10 + curves.CACHED_VIEWS + 3):
        curves_of(people, e, f"?points={points}")
    assert len(curves.fragments._items) == curves.CACHED_VIEWS


# --- /trials/{id}/logs filters ---


def test_logs_filter_by_rank_level_and_text_and_tail_after_an_id(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = new_trial(people, e)
    lines = [
        (0, "INFO", "epoch 1 done"),
        (1, "INFO", "epoch 1 done"),
        (1, "LOG_LEVEL_WARNING", "loss is NaN"),
        (0, "ERROR", "CUDA out of memory"),
        (2, "DEBUG", "epoch 2 started"),
        (None, None, "100% done"),
    ]
    with people.db.begin() as conn:
        conn.execute(
            schema.trial_logs.insert(),
            [{"trial_id": t, "timestamp": NOW, "rank": r, "level": lv, "message": m} for r, lv, m in lines],
        )
        ids = list(
            conn.execute(
                select(schema.trial_logs.c.id).where(schema.trial_logs.c.trial_id == t).order_by("id")
            ).scalars()
        )

    def messages(query: str) -> list[tuple[int | None, str]]:
        answer = people.call("viewer", "GET", f"/trials/{t}/logs{query}")
        assert answer.status_code == 200, answer.text
        return [(line["rank"], line["message"]) for line in answer.json()["logs"]]

    assert messages("?rank=1") == [(1, "epoch 1 done"), (1, "loss is NaN")]
    assert messages("?rank=0&rank=2") == [
        (0, "epoch 1 done"),
        (0, "CUDA out of memory"),
        (2, "epoch 2 started"),
    ]
    assert messages("?level=WARNING") == [(1, "loss is NaN"), (0, "CUDA out of memory")]
    assert messages("?search=EPOCH%201") == [(0, "epoch 1 done"), (1, "epoch 1 done")]
    assert messages("?search=100%25") == [(None, "100% done")]  # % is a character, not a wildcard
    assert messages(f"?after={ids[3]}&rank=2") == [(2, "epoch 2 started")]
    assert messages("?rank=1&tail=1") == [(1, "loss is NaN")]
    assert people.call("viewer", "GET", f"/trials/{t}/logs?level=LOUD").status_code == 422
