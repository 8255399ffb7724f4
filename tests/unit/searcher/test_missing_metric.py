"""A validation without the searcher's metric, as Determined takes it: an error only where the search
decides on the metric (adaptive search), accepted by single, grid and random search, in the search
methods and in the master that drives them."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.config._types import Length
from det_airflow.master import experiments, schema, search
from det_airflow.searcher import SearcherError, SearchMethod, make_search_method
from tests.unit.master.people_app import People, people  # noqa: F401 - the fixture

ACCEPTING = [("single", {}), ("random", {"max_trials": 2}), ("grid", {})]
ADAPTIVE = [
    ("adaptive_asha", {"max_trials": 4, "max_length": Length("batches", 100)}),
    ("async_halving", {"max_trials": 4, "num_rungs": 2, "max_length": Length("batches", 100)}),
]


@pytest.mark.parametrize(("name", "fields"), ACCEPTING)
def test_single_grid_and_random_go_on_after_a_validation_without_the_metric(make_config, name, fields):
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    assert method.validation_completed(1, {"accuracy": 0.9}, 10) == []
    assert method.validation_completed(1, {"validation_loss": 0.1}, 20) == []


@pytest.mark.parametrize(("name", "fields"), ADAPTIVE)
def test_adaptive_search_refuses_a_validation_without_the_metric_naming_it(make_config, name, fields):
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    with pytest.raises(SearcherError) as err:
        method.validation_completed(1, {"accuracy": 0.9}, 100)
    assert (
        str(err.value) == "validation metric 'validation_loss' not found in the reported metrics (accuracy)"
    )


def test_a_sampler_that_learns_from_the_metric_needs_it(make_config):
    method = make_search_method(make_config("random", max_trials=2, sampler="tpe"))
    method.initial_trials()
    assert method.needs_metric
    with pytest.raises(SearcherError, match="'validation_loss' not found"):
        method.validation_completed(1, {"accuracy": 0.9}, 10)


def _experiment(people: People, searcher: dict[str, Any]) -> int:  # noqa: F811
    experiment_id = people.add_experiment(owner="alice")
    config = {**people.experiment(experiment_id).config, "searcher": searcher}
    with people.db.begin() as conn:
        conn.execute(
            update(schema.experiments)
            .where(schema.experiments.c.id == experiment_id)
            .values(config=config, searcher_state=None)
        )
        search.start(conn, experiments.get_experiment(conn, experiment_id))
    return experiment_id


def _validate(request_id: int, metrics: dict[str, Any], method: SearchMethod) -> list[Any]:
    return method.validation_completed(request_id, metrics, 10)


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        {"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": 10}},
        {"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
    ],
)
def test_the_master_keeps_the_experiment_going(people: People, searcher: dict[str, Any]) -> None:  # noqa: F811
    experiment_id = _experiment(people, searcher)
    with people.db.begin() as conn:
        search.send(conn, experiment_id, functools.partial(_validate, 1, {"accuracy": 0.9}))
    row = people.experiment(experiment_id)
    assert row.state == "ACTIVE"
    assert row.error is None
    assert not row.search_done


def test_the_master_ends_an_adaptive_search_naming_the_metric(people: People) -> None:  # noqa: F811
    searcher = {"name": "adaptive_asha", "metric": "loss", "max_trials": 2, "max_length": {"batches": 10}}
    experiment_id = _experiment(people, searcher)
    with people.db.begin() as conn:
        search.send(conn, experiment_id, functools.partial(_validate, 1, {"accuracy": 0.9}))
    row = people.experiment(experiment_id)
    assert row.state == "ERROR"
    assert row.error == "validation metric 'loss' not found in the reported metrics (accuracy)"
