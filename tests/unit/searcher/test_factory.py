"""Choosing a search method from the config, and counting trial slots."""

from __future__ import annotations

import subprocess
import sys

import pytest

from det_airflow.config._types import IntHP, Length, LogHP
from det_airflow.searcher import (
    AdaptiveASHASearch,
    AsyncHalvingSearch,
    SearcherError,
    make_search_method,
    trial_slot_count,
)
from det_airflow.searcher._optuna import OptunaSampler


def test_trial_slots_grid_is_the_number_of_points(make_config):
    assert trial_slot_count(make_config("grid")) == 16
    assert trial_slot_count(make_config("grid", {"n": IntHP(1, 3, count=10)})) == 3


def test_trial_slots_random_is_max_trials_and_single_is_one(make_config):
    assert trial_slot_count(make_config("random", max_trials=12, max_concurrent_trials=2)) == 12
    assert trial_slot_count(make_config("single")) == 1


@pytest.mark.parametrize(
    ("name", "cls", "fields"),
    [("adaptive_asha", AdaptiveASHASearch, {}), ("async_halving", AsyncHalvingSearch, {"num_rungs": 3})],
)
def test_asha_searchers_map_max_trials_slots(make_config, name, cls, fields):
    config = make_config(name, max_trials=16, max_length=Length("batches", 937), **fields)
    assert trial_slot_count(config) == 16
    assert type(make_search_method(config)) is cls


@pytest.mark.parametrize("sampler", ["tpe", "qmc"])
def test_optuna_samplers_are_available_for_sampling_searchers(make_config, sampler):
    method = make_search_method(make_config("random", max_trials=2, sampler=sampler))
    assert isinstance(method.sampler, OptunaSampler)


def test_the_default_sampler_does_not_import_optuna():
    code = (
        "import sys, det_airflow.searcher as s; "
        "from det_airflow.config._types import *; "
        "c = ExperimentConfig(entrypoint='x', searcher=SearcherConfig(name='random', metric='m', max_trials=2)); "
        "s.make_search_method(c).initial_trials(); "
        "assert 'optuna' not in sys.modules, 'optuna imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_grid_without_count_is_a_searcher_error(make_config):
    with pytest.raises(SearcherError, match="hyperparameters.lr"):
        trial_slot_count(make_config("grid", {"lr": LogHP(-4, -1)}))
