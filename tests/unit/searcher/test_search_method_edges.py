"""Shared search-method bookkeeping at its edges: state, request ids, seeds and time values."""

from __future__ import annotations

import random

import optuna
import pytest

from det_airflow.config._types import Length
from det_airflow.searcher import (
    RandomSampler,
    SearcherError,
    Shutdown,
    concurrent_slot_count,
    load_search_method,
    make_search_method,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _untemper(y: int) -> int:
    """The Mersenne Twister state word whose tempered output is ``y``."""
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    out = y
    for _ in range(5):
        out = y ^ ((out << 7) & 0x9D2C5680)
    y = out & 0xFFFFFFFF
    out = y
    for _ in range(3):
        out = y ^ (out >> 11)
    return out & 0xFFFFFFFF


def test_a_new_search_is_stored_as_not_shut_down(make_config):
    assert make_search_method(make_config("random", max_trials=2)).state_dict()["shut_down"] is False


def test_a_state_from_another_searcher_is_refused_naming_both(make_config):
    grid_state = make_search_method(make_config("grid")).state_dict()
    with pytest.raises(SearcherError) as err:
        load_search_method(make_config("random", max_trials=2), grid_state)
    assert str(err.value) == (
        "the stored searcher state (method 'grid', version 1) does not fit searcher 'random' (version 1)"
    )


def test_a_trial_seed_fits_31_bits_even_when_the_next_32_random_bits_are_2_to_the_31(make_config):
    config = make_config("grid", max_concurrent_trials=1)
    method = make_search_method(config)
    method.initial_trials()
    state = method.state_dict()
    version, internal, _ = state["rng"]
    internal[623], internal[624] = _untemper(2**31), 623
    probe = random.Random()
    probe.setstate((version, tuple(internal), None))
    assert probe.getrandbits(32) == 2**31
    state["rng"] = [version, internal, None]
    (create,) = load_search_method(config, state).trial_exited(1)
    assert 0 <= create.trial_seed <= 2**31 - 1


def test_the_next_request_id_is_not_a_trial_yet(make_config):
    method = make_search_method(make_config("single"))
    method.initial_trials()
    assert method.operation_length(1) is None
    with pytest.raises(ValueError, match="^no trial was created with request id 2$"):
        method.operation_length(2)


def test_a_search_with_nothing_to_run_shuts_down_without_calling_it_a_failure(make_config):
    assert make_search_method(make_config("random", max_trials=0)).initial_trials() == [
        Shutdown(failure=False)
    ]


def test_a_concurrency_limit_of_one_runs_one_trial_at_a_time(make_config):
    assert concurrent_slot_count(make_config("random", max_trials=5, max_concurrent_trials=1)) == 1


@pytest.mark.parametrize(("pool_capacity", "expected"), [(0, 5), (-1, 5), (1, 1), (2, 2)])
def test_a_pool_bounds_the_slots_from_one_slot_up_and_zero_means_no_bound(
    make_config, pool_capacity, expected
):
    config = make_config("random", max_trials=5, max_concurrent_trials=0)
    assert concurrent_slot_count(config, pool_capacity) == expected


@pytest.mark.parametrize("name", ["single", "grid"])
def test_single_and_grid_keep_their_hyperparameters_whatever_the_sampler(make_config, name):
    assert isinstance(make_search_method(make_config(name, sampler="tpe")).sampler, RandomSampler)


def _asha(make_config, **fields):
    fields = {"max_trials": 4, "num_rungs": 2, "sampler": "tpe"} | fields
    return make_search_method(make_config("async_halving", **fields))


def test_a_missing_time_metric_names_what_was_reported(make_config):
    method = _asha(make_config, time_metric="epochs", max_time=10)
    method.initial_trials()
    with pytest.raises(SearcherError) as err:
        method.validation_completed(1, {"validation_loss": 0.1, "loss": 1.0}, 5)
    assert str(err.value) == (
        "time metric 'epochs' (searcher.time_metric) not found in the reported metrics (loss, validation_loss)"
    )


@pytest.mark.parametrize(
    ("fields", "metrics", "message"),
    [
        (
            {"time_metric": "epochs", "max_time": 10},
            {"epochs": None},
            "time metric 'epochs' must be a number, got None",
        ),
        (
            {"max_length": Length("records", 640)},
            {"records": "n/a"},
            "time metric 'records' must be a number, got 'n/a'",
        ),
    ],
)
def test_a_time_value_that_is_not_a_number_is_refused_naming_it(make_config, fields, metrics, message):
    method = _asha(make_config, **fields)
    method.initial_trials()
    with pytest.raises(SearcherError) as err:
        method.validation_completed(1, {"validation_loss": 0.1, **metrics}, 5)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("length", "metrics", "step"),
    [
        (Length("batches", 100), {"batches": 7}, 50),
        (Length("records", 6400), {"records": 3200}, 3200),
        (Length("records", 6400), {}, 50),
    ],
)
def test_a_report_is_timed_in_the_unit_of_max_length(make_config, length, metrics, step):
    method = _asha(make_config, max_length=length)
    method.initial_trials()
    method.validation_completed(1, {"validation_loss": 0.4, **metrics}, 50)
    assert method.sampler.study.trials[0].intermediate_values == {step: 0.4}
