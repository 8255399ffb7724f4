"""Bracket arithmetic at its edges: float shares, one-rung concurrency, explicit bracket rungs."""

from __future__ import annotations

import pytest

from det_airflow.config._types import Length
from det_airflow.searcher import make_search_method
from det_airflow.searcher._brackets import bracket_trials, single_bracket


@pytest.mark.parametrize(
    ("max_trials", "expected"),
    [(197, [68, 52, 42, 35]), (394, [135, 105, 84, 70])],
)
def test_budget_shares_truncate_the_weights_d_to_the_r_minus_1_over_r(max_trials, expected):
    # With divisor 1.5 the shares land next to whole numbers: any other weight scale rounds differently.
    assert bracket_trials(max_trials, 1.5, [7, 6, 5, 4]) == expected


@pytest.mark.parametrize(
    ("num_rungs", "divisor", "expected"),
    [(1, 4, 1), (2, 1.5, 1), (2, 2, 2), (3, 2, 4), (3, 4, 5)],
)
def test_an_unlimited_halving_bracket_runs_d_to_the_r_minus_1_trials_at_least_one(
    num_rungs, divisor, expected
):
    bracket = single_bracket(num_rungs=num_rungs, max_trials=5, divisor=divisor, max_concurrent_trials=0)
    assert bracket.max_concurrent_trials == expected


def test_a_one_rung_halving_search_with_no_limit_runs_one_trial_at_a_time(make_config):
    config = make_config(
        "async_halving", max_trials=4, num_rungs=1, max_length=Length("batches", 100), max_concurrent_trials=0
    )
    assert len(make_search_method(config).initial_trials()) == 1


def test_adaptive_asha_keeps_the_bracket_rungs_it_is_given(make_config):
    config = make_config(
        "adaptive_asha", max_trials=16, max_length=Length("batches", 937), bracket_rungs=(1, 3)
    )
    method = make_search_method(config)
    assert [b.plan.num_rungs for b in method.brackets] == [3, 1]
