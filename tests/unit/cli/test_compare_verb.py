"""`det experiment compare`: the trials of several experiments in one table, against the master's
own routes (the people app on SQLite, served on loopback)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people
from tests.unit.master.test_importance import _experiment, _trial

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


def _two_experiments(cluster: Cluster) -> tuple[int, int]:
    first = _experiment(cluster.people, hyperparameters={"lr": 0.1, "opt": {"name": "sgd"}})
    _trial(cluster.people, first, {"lr": 0.1, "opt": {"name": "sgd"}}, 0.5, validation={"loss": 0.5})
    second = _experiment(cluster.people, hyperparameters={"lr": 0.2, "layers": 3})
    _trial(cluster.people, second, {"lr": 0.2, "layers": 3}, 0.25, validation={"loss": 0.25})
    _trial(cluster.people, second, {"lr": 0.2, "layers": 3}, None)
    return first, second


def test_compare_lists_every_trial_with_the_union_of_hyperparameters(det: Any, cluster: Cluster) -> None:
    first, second = _two_experiments(cluster)

    shown = det("experiment", "compare", str(first), str(second))

    assert shown.code == 0, shown.err
    header, rows = _table(shown.out)
    assert header == [
        "Trial ID",
        "Experiment ID",
        "State",
        "layers",
        "lr",
        "opt.name",
        "Searcher Metric",
        "Best Validation",
        "# of Batches",
    ]
    assert [row[1:] for row in rows] == [
        [str(first), "COMPLETED", "", "0.1", "sgd", "loss", "0.5", "0"],
        [str(second), "COMPLETED", "3", "0.2", "", "loss", "0.25", "0"],
        [str(second), "COMPLETED", "3", "0.2", "", "loss", "", "0"],
    ]


def test_compare_takes_a_comma_list_and_prints_csv_and_json(det: Any, cluster: Cluster) -> None:
    first, second = _two_experiments(cluster)

    as_csv = det("e", "compare", f"{first},{second}", "--csv")
    as_json = det("e", "compare", f"{first},{second}", "--json")

    assert as_csv.code == 0, as_csv.err
    rows = list(csv.DictReader(io.StringIO(as_csv.out)))
    assert [(r["Experiment ID"], r["lr"], r["Best Validation"]) for r in rows] == [
        (str(first), "0.1", "0.5"),
        (str(second), "0.2", "0.25"),
        (str(second), "0.2", ""),
    ]
    trials = json.loads(as_json.out)
    assert trials[0]["hparams"] == {"lr": 0.1, "opt.name": "sgd"}
    assert [t["best_validation"] for t in trials] == [0.5, 0.25, None]
    assert {t["searcher_metric"] for t in trials} == {"loss"}


def test_compare_needs_two_experiments(det: Any, cluster: Cluster) -> None:
    first, _ = _two_experiments(cluster)

    shown = det("e", "compare", str(first))

    assert shown.code != 0
    assert "compare takes 2 to 10 different experiment IDs, got 1" in shown.err
    assert "Traceback" not in shown.err
    assert det("e", "compare", f"{first},{first}").code != 0


def test_compare_names_an_unknown_experiment(det: Any, cluster: Cluster) -> None:
    first, _ = _two_experiments(cluster)

    shown = det("e", "compare", str(first), "999")

    assert shown.code != 0
    assert "999" in shown.err and len(shown.err.strip().splitlines()) == 1
    assert "Traceback" not in shown.err
