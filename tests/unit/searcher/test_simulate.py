"""Simulating a search offline: the method's own code against made-up learning curves."""

from __future__ import annotations

import random

from det_airflow.config._types import Length
from det_airflow.searcher import Resume, Shutdown, make_search_method, simulate
from det_airflow.searcher._simulate import closed_form_lengths


def _noise(seed=0):
    rng = random.Random(seed)
    return lambda create, units: rng.random()


def test_adaptive_asha_runs_to_shutdown_with_trials_ending_at_rung_lengths(make_config):
    config = make_config("adaptive_asha", max_trials=16, max_length=Length("batches", 937))
    sim = simulate(make_search_method(config), _noise())
    assert sim.finished and sim.actions[-1] == Shutdown()
    assert len(sim.trials) == 16
    lengths = sim.lengths()
    assert set(lengths) <= {58, 234, 937} and sum(lengths.values()) == 16
    assert sim.spent == sum(length * count for length, count in lengths.items())
    assert all(t.state in ("stopped", "exited") for t in sim.trials.values())


def test_every_random_search_trial_trains_the_full_length(make_config):
    sim = simulate(
        make_search_method(make_config("random", max_trials=5, max_length=Length("batches", 40))), _noise()
    )
    assert sim.lengths() == {40: 5} and sim.spent == 200
    assert [r.units for r in sim.reports] == [40] * 5


def test_a_budget_ends_the_simulation_early(make_config):
    config = make_config("adaptive_asha", max_trials=100, max_length=Length("batches", 81), divisor=3)
    sim = simulate(make_search_method(config), _noise(), budget=500)
    assert not sim.finished and sim.spent == 500
    assert all(r.spent <= 500 for r in sim.reports)


def test_promotion_based_trials_pause_resume_and_train_cumulative_rungs(make_config):
    config = make_config(
        "async_halving",
        max_trials=27,
        num_rungs=3,
        divisor=3,
        max_length=Length("batches", 90),
        stop_once=False,
    )
    sim = simulate(make_search_method(config), _noise(1))
    assert sim.finished
    lengths = sim.lengths()
    # Rungs at 10, 10+30, 10+30+90 units; asynchronous promotion may send one extra trial on.
    assert set(lengths) == {10, 40, 130} and sum(lengths.values()) == 27
    assert lengths[130] == 3 and lengths[10] >= 17
    assert any(isinstance(a, Resume) for a in sim.actions)


def test_reports_carry_the_time_metric(make_config):
    config = make_config(
        "async_halving",
        max_trials=4,
        num_rungs=2,
        divisor=2,
        max_length=None,
        time_metric="epoch",
        max_time=4,
    )
    sim = simulate(make_search_method(config), _noise())
    assert sim.finished and set(sim.lengths()) <= {2, 4}


def test_the_same_seeds_simulate_the_same_search(make_config):
    config = make_config("adaptive_asha", max_trials=30, max_length=Length("batches", 100), divisor=3)
    first = simulate(make_search_method(config), _noise(4))
    second = simulate(make_search_method(config), _noise(4))
    assert first.actions == second.actions and first.reports == second.reports


def test_closed_form_follows_determined_preview_per_bracket(make_config):
    # brackets (3 rungs, 7 trials), (2, 2), (1, 1); rungs 111, 333, 1000
    config = make_config(
        "adaptive_asha", max_trials=10, max_time=1000, time_metric="batches", divisor=3, mode="conservative"
    )
    assert closed_form_lengths(make_search_method(config)) == {111: 5, 333: 2, 1000: 3}


def test_closed_form_sums_brackets_of_a_standard_search(make_config):
    config = make_config("adaptive_asha", max_trials=16, max_length=Length("batches", 937))
    assert closed_form_lengths(make_search_method(config)) == {58: 9, 234: 5, 937: 2}


def test_closed_form_leaves_promotion_asha_and_random_search_to_the_simulation(make_config):
    promotion = make_config(
        "adaptive_asha", max_trials=16, max_length=Length("batches", 937), stop_once=False
    )
    random_search = make_config("random", max_trials=5, max_length=Length("batches", 40))
    assert closed_form_lengths(make_search_method(promotion)) is None
    assert closed_form_lengths(make_search_method(random_search)) is None
