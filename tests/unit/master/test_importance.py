"""Hyperparameter importance on the master: the answer Optuna's own evaluators give on the same
trials, constants left out, and what a caller sees when there is nothing to rank."""

from __future__ import annotations

import random
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from det_airflow.master import schema
from tests.unit.master.people_app import People

HYPERPARAMETERS = {
    "learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "layers": {"type": "int", "minval": 1, "maxval": 4},
    "optimizer": {"type": "categorical", "vals": ["sgd", "adam"]},
    "dropout1": 0.25,
    "global_batch_size": {"type": "const", "val": 64},
    "head": {"width": {"type": "double", "minval": 0.0, "maxval": 1.0}},
}


def _experiment(people: People, *, hyperparameters: dict[str, Any] = HYPERPARAMETERS) -> int:
    experiment_id = people.add_experiment(owner="alice")
    config = dict(people.experiment(experiment_id).config)
    config["hyperparameters"] = hyperparameters
    with people.db.begin() as conn:
        conn.execute(
            schema.experiments.update().where(schema.experiments.c.id == experiment_id).values(config=config)
        )
    return experiment_id


def _trial(
    people: People, experiment_id: int, hparams: dict[str, Any], loss: float | None, **summary: Any
) -> None:
    trial_id = people.add_trial(experiment_id, state="COMPLETED")
    with people.db.begin() as conn:
        conn.execute(
            schema.trials.update()
            .where(schema.trials.c.id == trial_id)
            .values(hparams=hparams, best_validation=loss, summary=summary)
        )


def _searched_trials(
    people: People, experiment_id: int, count: int = 40
) -> list[tuple[dict[str, Any], float]]:
    """Trials whose loss the learning rate explains most, the layers a little, the rest not at all."""
    rng = random.Random(7)
    made = []
    for _ in range(count):
        hparams = {
            "learning_rate": 10 ** rng.uniform(-4, -1),
            "layers": rng.randint(1, 4),
            "optimizer": rng.choice(["sgd", "adam"]),
            "dropout1": 0.25,
            "global_batch_size": 64,
            "head": {"width": rng.random()},
        }
        loss = (hparams["learning_rate"] * 30) ** 2 + 0.05 * hparams["layers"] + rng.random() * 0.01
        _trial(people, experiment_id, hparams, loss, validation={"accuracy": 1 - loss})
        made.append((hparams, loss))
    return made


def _optuna_importances(made: list[tuple[dict[str, Any], float]]) -> dict[str, float]:
    distributions = {
        "learning_rate": FloatDistribution(1e-4, 1e-1, log=True),
        "layers": IntDistribution(1, 4),
        "optimizer": CategoricalDistribution(["sgd", "adam"]),
        "head.width": FloatDistribution(0.0, 1.0),
    }
    study = optuna.create_study()
    for hparams, loss in made:
        params = {
            "learning_rate": hparams["learning_rate"],
            "layers": hparams["layers"],
            "optimizer": hparams["optimizer"],
            "head.width": hparams["head"]["width"],
        }
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=loss))
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))


def test_importance_is_optunas_fanova_on_the_same_trials(people: People) -> None:
    experiment_id = _experiment(people)
    made = _searched_trials(people, experiment_id)

    answer = people.call("viewer", "GET", f"/experiments/{experiment_id}/hyperparameter-importance")

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["metric"] == "loss" and body["evaluator"] == "fanova" and body["trials"] == 40
    expected = _optuna_importances(made)
    names = [item["name"] for item in body["importances"]]
    assert names == sorted(expected, key=lambda name: -expected[name])
    assert names[0] == "learning_rate"
    for item in body["importances"]:
        assert item["importance"] == pytest.approx(expected[item["name"]], abs=0.05)
    assert body["constants"] == ["dropout1", "global_batch_size"]
    assert body["note"] is None


def test_another_metric_and_ped_anova_can_be_asked_for(people: People) -> None:
    experiment_id = _experiment(people)
    _searched_trials(people, experiment_id)

    answer = people.call(
        "viewer",
        "GET",
        f"/experiments/{experiment_id}/hyperparameter-importance?metric=accuracy&evaluator=ped_anova",
    )

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["metric"] == "accuracy" and body["evaluator"] == "ped_anova" and body["trials"] == 40
    assert {item["name"] for item in body["importances"]} == {
        "learning_rate",
        "layers",
        "optimizer",
        "head.width",
    }
    assert sum(item["importance"] for item in body["importances"]) == pytest.approx(1.0)


def test_too_few_trials_or_one_value_give_a_note_not_an_error(people: People) -> None:
    experiment_id = _experiment(people)
    hparams = {"learning_rate": 0.01, "layers": 2, "optimizer": "sgd", "head": {"width": 0.5}}
    _trial(people, experiment_id, hparams, 0.3)
    _trial(people, experiment_id, hparams, None)  # no validation yet: not a point

    one = people.call("viewer", "GET", f"/experiments/{experiment_id}/hyperparameter-importance").json()
    assert one["importances"] == [] and one["trials"] == 1
    assert one["note"] == "1 trial(s) reported 'loss'; importance needs at least 2"

    _trial(people, experiment_id, {**hparams, "layers": 3}, 0.3)
    same = people.call("viewer", "GET", f"/experiments/{experiment_id}/hyperparameter-importance").json()
    assert same["importances"] == []
    assert same["note"] == "'loss' is the same in every trial: no hyperparameter explains a difference"


def test_unknown_metric_evaluator_and_experiment(people: People) -> None:
    experiment_id = _experiment(people)
    _searched_trials(people, experiment_id, count=5)

    unknown_metric = people.call(
        "viewer", "GET", f"/experiments/{experiment_id}/hyperparameter-importance?metric=nope"
    ).json()
    assert unknown_metric["importances"] == []
    assert unknown_metric["note"] == "0 trial(s) reported 'nope'; importance needs at least 2"

    bad_evaluator = people.call(
        "viewer", "GET", f"/experiments/{experiment_id}/hyperparameter-importance?evaluator=shap"
    )
    assert bad_evaluator.status_code == 422
    assert "fanova" in bad_evaluator.text

    missing = people.call("viewer", "GET", "/experiments/999/hyperparameter-importance")
    assert missing.status_code == 404


def test_reading_importance_needs_read_access(people: People) -> None:
    readable = _experiment(people)  # det_1: carol may read it
    hidden = _experiment(people)
    _searched_trials(people, readable, count=5)
    _searched_trials(people, hidden, count=5)

    assert (
        people.call("carol", "GET", f"/experiments/{readable}/hyperparameter-importance").status_code == 200
    )
    refused = people.call("carol", "GET", f"/experiments/{hidden}/hyperparameter-importance")
    assert refused.status_code == 403
    assert "hyperparameter importance" in refused.text
