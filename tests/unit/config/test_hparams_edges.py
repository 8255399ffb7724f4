"""Hyperparameters at their edges: the bounds a message names for a global_batch_size past
INT32_MAX, the grid of an int range shorter than its count, a missing or null bound or base, and
the kind a message names."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import parse_config
from det_airflow.config._limits import INT32_MAX, MAX_GRID_POINTS
from det_airflow.errors import ConfigError


def problems(
    hyperparameters: dict[str, Any], searcher: str = "random", slots: int = 1
) -> list[tuple[str, str]]:
    config = {
        "entrypoint": "python3 train.py",
        "hyperparameters": hyperparameters,
        "resources": {"slots_per_trial": slots},
        "searcher": {"name": searcher, "metric": "loss", "max_length": 10, "max_trials": 2},
    }
    with pytest.raises(ConfigError) as err:
        parse_config(config)
    return err.value.problems


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"type": "int", "minval": 8, "maxval": INT32_MAX + 1}, "hyperparameters.global_batch_size.maxval"),
        ({"type": "categorical", "vals": [8, INT32_MAX + 1]}, "hyperparameters.global_batch_size.vals[1]"),
        (INT32_MAX + 1, "hyperparameters.global_batch_size"),
    ],
)
def test_a_global_batch_size_past_int32_names_both_bounds(spec: Any, path: str) -> None:
    assert problems({"global_batch_size": spec}, slots=2) == [
        (
            path,
            f"expected an integer between 2 and {INT32_MAX} (at least resources.slots_per_trial), "
            f"got {INT32_MAX + 1}",
        )
    ]


def test_a_global_batch_size_at_int32_max_and_at_the_slot_count_fits() -> None:
    for spec in ({"type": "int", "minval": 2, "maxval": INT32_MAX}, {"type": "categorical", "vals": [2]}):
        config = {
            "entrypoint": "python3 train.py",
            "hyperparameters": {"global_batch_size": spec},
            "resources": {"slots_per_trial": 2},
            "searcher": {"name": "random", "metric": "loss", "max_length": 10, "max_trials": 2},
        }
        parse_config(config)


def test_a_global_batch_size_below_the_slots_names_only_the_lower_bound() -> None:
    assert problems({"global_batch_size": {"type": "categorical", "vals": [1, 4]}}, slots=2) == [
        (
            "hyperparameters.global_batch_size.vals[0]",
            "expected an integer >= 2 (at least resources.slots_per_trial), got 1",
        )
    ]


@pytest.mark.parametrize(("kind", "extra"), [("double", {}), ("log", {"base": 10})])
def test_a_global_batch_size_of_another_kind_is_named(kind: str, extra: dict[str, Any]) -> None:
    spec = {"type": kind, "minval": 1, "maxval": 2, **extra}
    assert problems({"global_batch_size": spec}) == [
        (
            "hyperparameters.global_batch_size",
            f"expected an integer, or an int, categorical or const hyperparameter, got a {kind} hyperparameter",
        )
    ]


def test_the_grid_of_an_int_range_counts_its_values_when_count_is_larger() -> None:
    # 2 values (1 and 2) with count 1000, times a count of MAX_GRID_POINTS // 2: exactly the limit.
    half = MAX_GRID_POINTS // 2
    grid = {
        "a": {"type": "int", "minval": 1, "maxval": 2, "count": 1000},
        "b": {"type": "double", "minval": 0, "maxval": 1, "count": half},
        "c": 5,  # a constant is one point of the grid
    }
    config = {
        "entrypoint": "python3 train.py",
        "hyperparameters": grid,
        "searcher": {"name": "grid", "metric": "loss", "max_length": 10},
    }
    parse_config(config)
    grid["a"]["maxval"] = 3  # 3 values: past the limit
    assert problems(grid, searcher="grid") == [
        (
            "hyperparameters",
            f"the grid has {3 * half:,} points (one trial each); at most {MAX_GRID_POINTS:,} are "
            "allowed: lower the counts or the number of categorical values",
        )
    ]


@pytest.mark.parametrize("kind", ["double", "log"])
@pytest.mark.parametrize("missing", ["minval", "maxval"])
def test_a_missing_bound_of_a_range_is_reported(kind: str, missing: str) -> None:
    spec: dict[str, Any] = {"type": kind, "minval": 1, "maxval": 2, "base": 10}
    if kind == "double":
        del spec["base"]
    del spec[missing]
    (problem,) = problems({"x": spec})
    assert problem[0] == f"hyperparameters.x.{missing}"
    assert problem[1].startswith("missing"), problem


@pytest.mark.parametrize("missing", ["minval", "maxval"])
def test_a_missing_bound_of_an_int_range_is_reported(missing: str) -> None:
    spec: dict[str, Any] = {"type": "int", "minval": 1, "maxval": 2}
    del spec[missing]
    (problem,) = problems({"x": spec})
    assert problem[0] == f"hyperparameters.x.{missing}"
    assert problem[1].startswith("missing"), problem


def test_a_log_hyperparameter_needs_its_base() -> None:
    (missing,) = problems({"lr": {"type": "log", "minval": -3, "maxval": -1}})
    assert missing[0] == "hyperparameters.lr.base"
    assert "for a log hyperparameter (e.g. base: 10)" in missing[1], missing
    assert problems({"lr": {"type": "log", "minval": -3, "maxval": -1, "base": None}}) == [
        ("hyperparameters.lr.base", "expected a number > 0, got null")
    ]


def test_grid_search_names_the_kind_of_a_range_without_count() -> None:
    assert problems({"x": {"type": "log", "minval": -3, "maxval": -1, "base": 10}}, searcher="grid") == [
        (
            "hyperparameters.x",
            "grid search needs 'count' (the number of grid points) on every log hyperparameter",
        )
    ]


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"type": "const"}, "hyperparameters.x.val", "the constant value"),
        ({"type": "categorical", "vals": []}, "hyperparameters.x.vals", "a non-empty list"),
    ],
)
def test_const_and_categorical_without_their_values(spec: dict[str, Any], path: str, message: str) -> None:
    (problem,) = problems({"x": spec})
    assert problem[0] == path and message in problem[1], problem
