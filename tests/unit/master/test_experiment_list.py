"""The experiment list shows each experiment's searcher metric and the best value its trials reached."""

from __future__ import annotations

from sqlalchemy import update

from det_airflow.master import schema
from tests.unit.master.people_app import People


def _set_best(people: People, trial_id: int, value: float | None) -> None:
    with people.db.begin() as conn:
        conn.execute(
            update(schema.trials).where(schema.trials.c.id == trial_id).values(best_validation=value)
        )


def _smaller_is_better(people: People, experiment_id: int, smaller: bool) -> None:
    config = dict(people.experiment(experiment_id).config)
    config["searcher"] = {**config["searcher"], "smaller_is_better": smaller}
    with people.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id).values(config=config)
        )


def _listed(people: People) -> dict[int, dict]:
    answer = people.call("admin", "GET", "/experiments")
    assert answer.status_code == 200
    return {e["id"]: e for e in answer.json()["experiments"]}


def test_the_list_shows_the_searcher_metric_and_the_best_of_the_trials(people: People) -> None:
    lower = people.add_experiment(owner="alice")
    higher = people.add_experiment(owner="alice")
    _smaller_is_better(people, higher, False)
    for experiment_id in (lower, higher):
        for value in (0.5, 0.25, None, 0.75):
            _set_best(people, people.add_trial(experiment_id, state="COMPLETED"), value)

    listed = _listed(people)

    assert listed[lower]["searcher_metric"] == "loss"
    assert listed[lower]["best_validation"] == 0.25
    assert listed[higher]["best_validation"] == 0.75


def test_an_experiment_without_reported_metrics_has_no_best_value(people: People) -> None:
    bare = people.add_experiment(owner="alice")
    waiting = people.add_experiment(owner="alice")
    _set_best(people, people.add_trial(waiting, state="RUNNING"), None)

    listed = _listed(people)

    assert listed[bare]["best_validation"] is None
    assert listed[waiting]["best_validation"] is None
    assert listed[bare]["searcher_metric"] == "loss"
