"""Choosing a search method from the config, and counting trial slots."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from det_airflow.config._types import IntHP, Length, LogHP
from det_airflow.searcher import (
    AdaptiveASHASearch,
    AsyncHalvingSearch,
    SearcherError,
    concurrent_slot_count,
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


def test_concurrent_slots_are_the_trials_that_can_run_at_once(make_config):
    # Each slot runs trial after trial: no more slots than max_concurrent_trials lets run at once.
    assert concurrent_slot_count(make_config("random", max_trials=12, max_concurrent_trials=5)) == 5
    assert concurrent_slot_count(make_config("random", max_trials=3, max_concurrent_trials=5)) == 3
    # 0 is no limit: every trial may run at once.
    assert concurrent_slot_count(make_config("random", max_trials=12, max_concurrent_trials=0)) == 12
    assert concurrent_slot_count(make_config("grid", max_concurrent_trials=0)) == 16
    assert concurrent_slot_count(make_config("single")) == 1


def test_concurrent_slots_are_bounded_by_the_trials_the_pool_holds_at_once(make_config):
    config = make_config("random", max_trials=12, max_concurrent_trials=0)
    assert concurrent_slot_count(config, pool_capacity=4) == 4
    gang = dataclasses.replace(config, resources=dataclasses.replace(config.resources, slots_per_trial=3))
    assert concurrent_slot_count(gang, pool_capacity=8) == 2  # two 3-slot gangs fit in 8 slots
    assert concurrent_slot_count(gang, pool_capacity=2) == 1  # the queue says why it cannot fit
    # An unlimited pool (-1), or none found, bounds nothing.
    assert concurrent_slot_count(config, pool_capacity=-1) == 12
    assert concurrent_slot_count(config, pool_capacity=None) == 12


def test_asha_searches_get_a_slot_for_what_each_bracket_runs_at_once(make_config):
    length = Length("batches", 937)
    # max_concurrent_trials 16 is split 8 + 8 between the two brackets of 12 and 4 trials: 8 + 4.
    adaptive = make_config(
        "adaptive_asha", max_trials=16, max_length=length, divisor=4, max_concurrent_trials=16
    )
    assert [(b.max_trials, b.max_concurrent_trials) for b in AdaptiveASHASearch.plan(adaptive, 937)] == [
        (12, 8),
        (4, 8),
    ]
    assert concurrent_slot_count(adaptive) == 12
    # Each bracket runs at least one trial at a time, whatever max_concurrent_trials says.
    one = make_config("adaptive_asha", max_trials=16, max_length=length, divisor=4, max_concurrent_trials=1)
    assert concurrent_slot_count(one) == 2
    # async_halving with 0: divisor ** (num_rungs - 1) at once, enough for one to reach the top rung.
    halving = make_config("async_halving", max_trials=20, max_length=length, num_rungs=3, divisor=3,
                          max_concurrent_trials=0)  # fmt: skip
    assert concurrent_slot_count(halving) == 9


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
