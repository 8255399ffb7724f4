"""Simulating searches at the edges: what reaches the method, event order at equal times, budgets."""

from __future__ import annotations

import random

from det_airflow.config._types import Length
from det_airflow.searcher import Pause, RandomSearch, Stop, make_search_method, simulate
from det_airflow.searcher._simulate import closed_form_lengths


def _value(create, units):
    return create.request_id + units / 1000


class Spy(RandomSearch):
    """Random search that records the events it gets; trial 1 may have its own length."""

    first_length: int | None = None
    stop_on_first_report: int | None = None

    def __init__(self, config):
        super().__init__(config)
        self.events = []

    def trial_created(self, request_id):
        self.events.append(("created", request_id))
        return super().trial_created(request_id)

    def validation_completed(self, request_id, metrics, steps_completed):
        self.events.append(("validated", request_id, metrics, steps_completed))
        actions = super().validation_completed(request_id, metrics, steps_completed)
        if self.stop_on_first_report and len([e for e in self.events if e[0] == "validated"]) == 1:
            actions.append(Stop(self.stop_on_first_report))
        return actions

    def operation_length(self, request_id):
        super().operation_length(request_id)
        return self.first_length if request_id == 1 else None


def test_every_trial_validates_at_each_given_length_and_reports_what_it_trained(make_config):
    config = make_config("random", max_trials=2, max_length=Length("batches", 30))
    sim = simulate(make_search_method(config), _value, validate_at=[10, 20])
    assert [(r.request_id, r.units, r.value, r.spent) for r in sim.reports] == [
        (1, 10, 1.01, 20),
        (2, 10, 2.01, 20),
        (1, 20, 1.02, 40),
        (2, 20, 2.02, 40),
        (1, 30, 1.03, 60),
        (2, 30, 2.03, 60),
    ]
    assert sim.trials[1].reports == [(10, 1.01), (20, 1.02), (30, 1.03)]
    assert [t.create.request_id for t in sim.trials.values()] == [1, 2]
    assert {t.state for t in sim.trials.values()} == {"exited"}


def test_without_a_length_trials_train_one_unit(make_config):
    sim = simulate(make_search_method(make_config("random", max_trials=3, max_length=None)), _value)
    assert sim.lengths() == {1: 3} and sim.spent == 3


def test_the_method_hears_its_own_trials_and_the_length_unit(make_config):
    method = Spy(
        make_config("random", max_trials=1, max_concurrent_trials=1, max_length=Length("records", 20))
    )
    simulate(method, _value, validate_at=[10])
    assert method.events == [
        ("created", 1),
        ("validated", 1, {"validation_loss": 1.01, "records": 10}, 10),
        ("validated", 1, {"validation_loss": 1.02, "records": 20}, 20),
    ]


def test_a_length_in_batches_is_not_repeated_as_a_metric(make_config):
    method = Spy(make_config("random", max_trials=1, max_length=Length("batches", 20)))
    simulate(method, _value)
    assert method.events == [("created", 1), ("validated", 1, {"validation_loss": 1.02}, 20)]


def test_validations_at_the_same_time_go_in_the_order_they_were_scheduled(make_config):
    method = Spy(
        make_config("random", max_trials=3, max_concurrent_trials=2, max_length=Length("batches", 10))
    )
    method.first_length = 5
    sim = simulate(method, _value, validate_at=[5])
    # At 5 units trial 1 ends and trial 3 starts before trial 2 goes on: at 10, trial 3 reports first.
    assert [(r.request_id, r.units, r.spent) for r in sim.reports] == [
        (1, 5, 10),
        (2, 5, 10),
        (3, 5, 20),
        (2, 10, 20),
        (3, 10, 25),
    ]


def test_a_trial_stopped_while_another_reports_trains_no_further(make_config):
    method = Spy(make_config("random", max_trials=2, max_length=Length("batches", 20)))
    method.stop_on_first_report = 2
    sim = simulate(method, _value, validate_at=[10])
    assert sim.finished
    assert (sim.trials[2].state, sim.trials[2].units) == ("stopped", 10)
    assert [(r.request_id, r.units) for r in sim.reports] == [(1, 10), (1, 20)]


def test_a_length_beyond_the_validation_points_is_still_reached(make_config):
    config = make_config("adaptive_asha", max_trials=2, max_length=Length("batches", 100), mode="aggressive")
    sim = simulate(make_search_method(config), _value, validate_at=[10], default_length=10)
    assert sim.finished
    assert [(r.request_id, r.units) for r in sim.reports][:2] == [(1, 10), (2, 10)]
    assert max(sim.lengths()) == 100


def test_stop_based_asha_validates_at_its_rungs_by_default(make_config):
    config = make_config("adaptive_asha", max_trials=16, max_length=Length("batches", 937))
    rng = random.Random(0)
    sim = simulate(make_search_method(config), lambda create, units: rng.random())
    assert set(sim.lengths()) == {58, 234, 937}


def test_promotion_asha_stops_its_paused_trials_at_the_end(make_config):
    config = make_config(
        "async_halving",
        max_trials=9,
        num_rungs=2,
        divisor=3,
        max_length=Length("batches", 90),
        stop_once=False,
    )
    sim = simulate(make_search_method(config), _value)
    assert sim.finished and sum(isinstance(a, Pause) for a in sim.actions) == 9
    assert sim.lengths() == {30: 6, 120: 3}
    assert {t.state for t in sim.trials.values()} == {"stopped"}


def test_a_budget_exactly_spent_on_the_last_validation_still_finishes(make_config):
    config = make_config("random", max_trials=1, max_length=Length("batches", 40))
    assert simulate(make_search_method(config), _value, budget=40).finished is True
    assert simulate(make_search_method(config), _value, budget=39).finished is False


def test_closed_form_keeps_a_lone_trial_on_to_the_top_rung(make_config):
    config = make_config("async_halving", max_trials=1, num_rungs=2, max_length=Length("batches", 100))
    assert closed_form_lengths(make_search_method(config)) == {100: 1}


def test_a_default_length_of_zero_trains_nothing(make_config):
    sim = simulate(make_search_method(make_config("random", max_trials=2)), _value, default_length=0)
    assert sim.finished and sim.lengths() == {0: 2} and sim.spent == 0
