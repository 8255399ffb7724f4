"""Choosing a search method from the config, and counting trial slots."""

from __future__ import annotations

import pytest

from det_airflow.config._types import IntHP, LogHP
from det_airflow.searcher import SearcherError, make_search_method, trial_slot_count


def test_trial_slots_grid_is_the_number_of_points(make_config):
    assert trial_slot_count(make_config("grid")) == 16
    assert trial_slot_count(make_config("grid", {"n": IntHP(1, 3, count=10)})) == 3


def test_trial_slots_random_is_max_trials_and_single_is_one(make_config):
    assert trial_slot_count(make_config("random", max_trials=12, max_concurrent_trials=2)) == 12
    assert trial_slot_count(make_config("single")) == 1


@pytest.mark.parametrize("name", ["adaptive_asha", "async_halving"])
def test_asha_searchers_map_max_trials_slots_but_are_not_available_yet(make_config, name):
    config = make_config(name, max_trials=16, max_length=None)
    assert trial_slot_count(config) == 16
    with pytest.raises(SearcherError, match=f"searcher '{name}' is not available yet"):
        make_search_method(config)


def test_optuna_samplers_are_not_available_yet(make_config):
    with pytest.raises(SearcherError, match="sampler 'tpe' is not available yet"):
        make_search_method(make_config("random", max_trials=2, sampler="tpe"))


def test_grid_without_count_is_a_searcher_error(make_config):
    with pytest.raises(SearcherError, match="hyperparameters.lr"):
        trial_slot_count(make_config("grid", {"lr": LogHP(-4, -1)}))
