"""`det experiment describe --importance`: each searched hyperparameter's importance as the master
computes it, against the master's own routes (the people app on SQLite, served on loopback)."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people
from tests.unit.master.test_importance import _experiment, _searched_trials

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


def test_describe_adds_the_importance_table(det: Any, cluster: Cluster) -> None:
    experiment_id = _experiment(cluster.people)
    _searched_trials(cluster.people, experiment_id)

    shown = det("experiment", "describe", str(experiment_id), "--importance")

    assert shown.code == 0, shown.err
    title = f"Hyperparameter importance of experiment {experiment_id} for loss (fANOVA, 40 trials):"
    assert title in shown.out
    table = shown.out.split(title, 1)[1].strip()
    header, rows = _table(table.split("\nConstant")[0])
    assert header == ["Hyperparameter", "Importance"]
    assert rows[0][0] == "learning_rate"
    assert {row[0] for row in rows} == {"learning_rate", "layers", "optimizer", "head.width"}
    assert "Constant (left out): dropout1, global_batch_size" in shown.out

    as_json = json.loads(det("e", "describe", str(experiment_id), "--importance", "accuracy", "--json").out)
    importance = as_json["hyperparameter_importance"]
    assert importance["metric"] == "accuracy" and importance["importances"][0]["name"] == "learning_rate"


def test_an_experiment_with_nothing_to_rank_says_why(det: Any, cluster: Cluster) -> None:
    experiment_id = _experiment(cluster.people)

    shown = det("experiment", "describe", str(experiment_id), "--importance")

    assert shown.code == 0, shown.err
    assert "0 trial(s) reported 'loss'; importance needs at least 2" in shown.out
