"""ASHA bracket arithmetic, checked against every worked example of docs/semantics.md §1.2."""

from __future__ import annotations

import pytest

from det_airflow.searcher import (
    Bracket,
    bracket_concurrency,
    bracket_trials,
    cumulative_rung_units,
    mode_rungs,
    plan_brackets,
    rung_count,
    rung_units,
    single_bracket,
)


def _plan(max_trials, length, divisor, mode, mct, **kw):
    fields = {"max_rungs": 5, **kw}
    return plan_brackets(
        max_trials=max_trials, length=length, divisor=divisor, mode=mode, max_concurrent_trials=mct, **fields
    )


def test_16_trials_937_batches_divisor_4_standard():
    assert _plan(16, 937, 4, "standard", 16) == [Bracket(3, 12, 8), Bracket(2, 4, 8)]
    assert rung_units(937, 4, 3) == [58, 234, 937]
    assert rung_units(937, 4, 2) == [234, 937]


def test_10_trials_100_units_divisor_4_standard_two_at_a_time():
    assert _plan(10, 100, 4, "standard", 2) == [Bracket(2, 7, 1), Bracket(1, 3, 1)]


def test_10_trials_1000_units_divisor_3_conservative_five_at_a_time():
    assert _plan(10, 1000, 3, "conservative", 5) == [Bracket(3, 7, 2), Bracket(2, 2, 2), Bracket(1, 1, 1)]


@pytest.mark.parametrize(
    ("max_trials", "divisor", "rungs", "expected"),
    [(20, 3, [3, 2, 1], [12, 5, 3]), (100, 4, [4, 3, 2], [70, 22, 8])],
)
def test_trials_per_bracket_examples(max_trials, divisor, rungs, expected):
    assert bracket_trials(max_trials, divisor, rungs) == expected
    assert sum(expected) == max_trials


def test_rung_count_is_limited_by_max_rungs_length_and_trials():
    assert rung_count(length=937, divisor=4, max_trials=16, max_rungs=5) == 3  # log4(16) + 1
    assert rung_count(length=100, divisor=4, max_trials=10_000, max_rungs=5) == 4  # int(3.32) + 1
    assert rung_count(length=10**9, divisor=2, max_trials=10**9, max_rungs=5) == 5
    # Floating point as Determined computes it: log(1000)/log(10) is 2.9999999999999996.
    assert rung_count(length=1000, divisor=10, max_trials=10**6, max_rungs=9) == 3


def test_modes_choose_the_bracket_rungs():
    assert mode_rungs("aggressive", 5) == [5]
    assert mode_rungs("standard", 5) == [3, 4, 5]
    assert mode_rungs("standard", 4) == [2, 3, 4]
    assert mode_rungs("conservative", 3) == [1, 2, 3]


def test_explicit_bracket_rungs_replace_the_mode_and_are_sorted_descending():
    plan = _plan(100, 1000, 4, "aggressive", 16, bracket_rungs=(2, 4, 3))
    assert [b.num_rungs for b in plan] == [4, 3, 2]
    assert [b.max_trials for b in plan] == [70, 22, 8]


def test_first_bracket_takes_what_is_left_of_max_trials_and_each_gets_at_least_one():
    assert bracket_trials(2, 4, [3, 2, 1]) == [1, 1, 1]  # every bracket runs a trial, even past max
    assert bracket_trials(7, 2, [1, 1]) == [4, 3]


def test_concurrency_is_split_evenly_with_the_remainder_to_the_first_brackets():
    assert bracket_concurrency(16, 4, [12, 4]) == [8, 8]
    assert bracket_concurrency(5, 3, [7, 2, 1]) == [2, 2, 1]
    assert bracket_concurrency(1, 4, [7, 3]) == [1, 1]  # at least one per bracket


def test_no_concurrency_limit_gives_each_bracket_the_last_brackets_trials_or_the_divisor():
    assert bracket_concurrency(0, 4, [12, 4]) == [4, 4]
    assert bracket_concurrency(0, 3, [70, 22, 8]) == [8, 8, 8]
    assert bracket_concurrency(0, 4.5, [9, 1]) == [4, 4]


def test_rung_units_are_at_least_one():
    assert rung_units(10, 4, 4) == [1, 1, 2, 10]


def test_cumulative_rungs_of_the_promotion_based_variant():
    assert cumulative_rung_units(937, 4, 3) == [58, 292, 1229]
    assert cumulative_rung_units(100, 4, 1) == [100]


def test_async_halving_bracket_concurrency():
    assert single_bracket(num_rungs=3, max_trials=20, divisor=4, max_concurrent_trials=5) == Bracket(3, 20, 5)
    assert single_bracket(num_rungs=3, max_trials=4, divisor=4, max_concurrent_trials=16) == Bracket(3, 4, 4)
    # No limit: d**(num_rungs-1), enough for one trial to reach the top, within [1, max_trials].
    assert single_bracket(num_rungs=3, max_trials=20, divisor=4, max_concurrent_trials=0) == Bracket(
        3, 20, 16
    )
    assert single_bracket(num_rungs=3, max_trials=5, divisor=4, max_concurrent_trials=0) == Bracket(3, 5, 5)
