"""Sampling and grid rules for hyperparameters (docs/semantics.md §1.1)."""

from __future__ import annotations

import math
import random

import pytest

from det_airflow.config._types import CategoricalHP, ConstHP, DoubleHP, IntHP, LogHP
from det_airflow.searcher import SearcherError, grid_points, sample_hparams


def _samples(hp, n=500, seed=0):
    rng = random.Random(seed)
    return [sample_hparams({"x": hp}, rng)["x"] for _ in range(n)]


# --- sampling --------------------------------------------------------------------------------------


def test_const_is_returned_as_written():
    assert _samples(ConstHP([1, 2]), n=3) == [[1, 2]] * 3


def test_int_is_uniform_over_the_inclusive_range():
    values = _samples(IntHP(3, 6))
    assert all(isinstance(v, int) for v in values)
    assert set(values) == {3, 4, 5, 6}


def test_double_is_uniform_between_min_and_max():
    values = _samples(DoubleHP(-1.0, 2.0))
    assert all(-1.0 <= v <= 2.0 for v in values)
    assert min(values) < -0.9 and max(values) > 1.9


def test_log_is_base_to_a_uniform_exponent():
    values = _samples(LogHP(-4, -1, base=10))
    exponents = [math.log10(v) for v in values]
    assert all(-4 <= e <= -1 for e in exponents)
    assert min(exponents) < -3.9 and max(exponents) > -1.1
    assert all(1 <= v <= 8 for v in _samples(LogHP(0, 3, base=2)))


def test_categorical_chooses_among_the_values():
    assert set(_samples(CategoricalHP(("a", 1, None)))) == {"a", 1, None}


def test_nested_groups_become_nested_dicts_in_written_order():
    group = {"b": ConstHP(1), "a": {"z": IntHP(0, 0), "y": {"deep": CategoricalHP(("only",))}}, "empty": {}}
    sample = sample_hparams(group, random.Random(0))
    assert sample == {"b": 1, "a": {"z": 0, "y": {"deep": "only"}}, "empty": {}}
    assert list(sample) == ["b", "a", "empty"] and list(sample["a"]) == ["z", "y"]


def test_same_rng_seed_samples_the_same_values():
    group = {"lr": LogHP(-5, -1), "n": IntHP(1, 100), "opt": CategoricalHP(("sgd", "adam"))}
    first = [sample_hparams(group, rng) for rng in [random.Random(42)] for _ in range(5)]
    second = [sample_hparams(group, rng) for rng in [random.Random(42)] for _ in range(5)]
    assert first == second


def test_sampled_values_do_not_alias_the_config():
    const = ConstHP({"k": [1]})
    sample = sample_hparams({"c": const}, random.Random(0))
    sample["c"]["k"].append(2)
    assert const.val == {"k": [1]}


# --- grid ------------------------------------------------------------------------------------------


def _axis(hp):
    return [p["x"] for p in grid_points({"x": hp})]


def test_int_grid_rounds_evenly_spaced_points():
    assert _axis(IntHP(0, 10, count=3)) == [0, 5, 10]
    assert _axis(IntHP(1, 4, count=3)) == [1, 3, 4]  # 1, 2.5, 4: halves round away from zero, like Go
    assert _axis(IntHP(-4, -1, count=3)) == [-4, -3, -1]  # -4, -2.5, -1


def test_int_grid_count_is_clamped_to_the_range_so_no_value_repeats():
    assert _axis(IntHP(1, 3, count=10)) == [1, 2, 3]
    assert _axis(IntHP(5, 5, count=4)) == [5]
    values = _axis(IntHP(0, 7, count=7))
    assert len(values) == len(set(values)) == 7


def test_double_grid_is_a_linspace_including_both_ends():
    assert _axis(DoubleHP(0.0, 1.0, count=5)) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert _axis(DoubleHP(0.1, 0.7, count=4))[-1] == 0.7


def test_log_grid_is_base_to_a_linspace():
    assert _axis(LogHP(-3, -1, base=10, count=3)) == pytest.approx([1e-3, 1e-2, 1e-1])
    assert _axis(LogHP(0, 4, base=2, count=3)) == [1.0, 4.0, 16.0]


def test_count_one_is_the_midpoint():
    assert _axis(IntHP(0, 10, count=1)) == [5]
    assert _axis(IntHP(0, 3, count=1)) == [2]  # 1.5 rounds away from zero
    assert _axis(DoubleHP(0.0, 1.0, count=1)) == [0.5]
    assert _axis(LogHP(-4, -2, count=1)) == pytest.approx([1e-3])


def test_categorical_grid_is_every_value_and_const_is_one():
    assert _axis(CategoricalHP(("a", "b", "c"))) == ["a", "b", "c"]
    assert _axis(ConstHP("fixed")) == ["fixed"]


def test_grid_is_the_cartesian_product_in_written_order_nested_included():
    group = {
        "a": IntHP(1, 2, count=2),
        "nested": {"b": CategoricalHP(("x", "y")), "c": ConstHP(0)},
        "d": DoubleHP(0.0, 1.0, count=2),
    }
    points = grid_points(group)
    assert len(points) == 8
    assert points[0] == {"a": 1, "nested": {"b": "x", "c": 0}, "d": 0.0}
    assert points[1] == {"a": 1, "nested": {"b": "x", "c": 0}, "d": 1.0}
    assert points[2] == {"a": 1, "nested": {"b": "y", "c": 0}, "d": 0.0}
    assert points[-1] == {"a": 2, "nested": {"b": "y", "c": 0}, "d": 1.0}
    assert all(list(p) == ["a", "nested", "d"] for p in points)


def test_no_hyperparameters_is_one_empty_point():
    assert grid_points({}) == [{}]
    assert grid_points({"g": {}}) == [{"g": {}}]


def test_grid_points_do_not_share_mutable_values():
    points = grid_points({"c": ConstHP([1]), "n": IntHP(0, 1, count=2)})
    points[0]["c"].append(2)
    assert points[1]["c"] == [1]


def test_grid_without_count_names_the_hyperparameter():
    with pytest.raises(SearcherError, match=r"hyperparameters\.optimizer\.lr: grid search needs 'count'"):
        grid_points({"optimizer": {"lr": LogHP(-4, -1)}})
