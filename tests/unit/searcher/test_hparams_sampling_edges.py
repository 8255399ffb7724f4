"""Sampled and grid hyperparameters never share mutable values with the config or each other."""

from __future__ import annotations

import random

import pytest

from det_airflow.config._types import CategoricalHP, ConstHP
from det_airflow.searcher import grid_points, sample_hparams

GROUP = {"choice": CategoricalHP(({"a": [1]},)), "fixed": ConstHP({"k": [1]})}


def test_changing_a_sampled_value_changes_neither_the_config_nor_the_next_draw():
    rng = random.Random(0)
    first = sample_hparams(GROUP, rng)
    first["choice"]["a"].append(9)
    first["fixed"]["k"].append(9)
    assert sample_hparams(GROUP, rng) == {"choice": {"a": [1]}, "fixed": {"k": [1]}}
    assert GROUP == {"choice": CategoricalHP(({"a": [1]},)), "fixed": ConstHP({"k": [1]})}


def test_changing_one_grid_point_leaves_the_others_alone():
    points = grid_points({"x": CategoricalHP((1, 2)), **GROUP})
    points[0]["choice"]["a"].append(9)
    points[0]["fixed"]["k"].append(9)
    assert points[1] == {"x": 2, "choice": {"a": [1]}, "fixed": {"k": [1]}}


def test_a_value_that_is_not_a_hyperparameter_is_named():
    with pytest.raises(TypeError) as err:
        sample_hparams({"x": 5}, random.Random(0))
    assert str(err.value) == "not a hyperparameter: 5"
