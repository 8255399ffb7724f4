"""Adaptive ASHA: brackets planned as Determined does, each running its own ASHA."""

from __future__ import annotations

import pytest

from det_airflow.config._types import Length
from det_airflow.searcher import AdaptiveASHASearch, Create, Shutdown, Stop, make_search_method

from .conftest import RungMaster


def _method(make_config, **fields):
    fields = {"max_trials": 16, "max_length": Length("batches", 937), "divisor": 4} | fields
    return make_search_method(make_config("adaptive_asha", **fields))


def _brackets(method):
    return [
        (b.plan.num_rungs, b.plan.max_trials, b.plan.max_concurrent_trials, b.units) for b in method.brackets
    ]


def test_reference_example_brackets_and_rungs(make_config):
    method = _method(make_config, max_concurrent_trials=16)
    assert isinstance(method, AdaptiveASHASearch)
    assert _brackets(method) == [(3, 12, 8, [58, 234, 937]), (2, 4, 8, [234, 937])]
    assert method.rung_lengths() == [58, 234, 937]


def test_each_bracket_starts_its_share_most_aggressive_first(make_config):
    method = _method(make_config, max_concurrent_trials=16)
    creates = method.initial_trials()
    assert [c.request_id for c in creates] == list(range(1, 13))  # 8 for bracket 0, then 4
    assert method._bracket_of == [0] * 8 + [1] * 4


def test_a_bracket_replaces_only_its_own_stopped_trials(make_config):
    method = _method(make_config, max_concurrent_trials=16)
    method.initial_trials()
    # Bracket 1 (rungs 234, 937) has created all 4 of its trials: a stop there creates nothing.
    assert method.validation_completed(9, {"validation_loss": 0.1}, 234) == []
    assert method.validation_completed(10, {"validation_loss": 0.9}, 234) == [Stop(10)]
    # Bracket 0 still has 4 of its 12 to create: a stop there creates one, in bracket 0.
    method.validation_completed(1, {"validation_loss": 0.1}, 58)
    actions = method.validation_completed(2, {"validation_loss": 0.9}, 58)
    assert [type(a) for a in actions] == [Stop, Create] and actions[1].request_id == 13
    assert method._bracket_of[12] == 0


def test_concurrency_is_per_bracket(make_config):
    method = _method(make_config, max_trials=10, max_length=Length("batches", 100), max_concurrent_trials=2)
    assert _brackets(method) == [(2, 7, 1, [25, 100]), (1, 3, 1, [100])]
    assert [c.request_id for c in method.initial_trials()] == [1, 2]
    # A one-rung bracket: reaching the length is the top rung.
    assert [type(a) for a in method.validation_completed(2, {"validation_loss": 1.0}, 100)] == [Stop, Create]


def test_conservative_mode_and_explicit_bracket_rungs(make_config):
    conservative = _method(
        make_config,
        max_trials=10,
        max_length=Length("batches", 1000),
        divisor=3,
        mode="conservative",
        max_concurrent_trials=5,
    )
    assert [b[:3] for b in _brackets(conservative)] == [(3, 7, 2), (2, 2, 2), (1, 1, 1)]
    explicit = _method(make_config, max_trials=100, divisor=4, bracket_rungs=(2, 4, 3))
    assert [b[:2] for b in _brackets(explicit)] == [(4, 70), (3, 22), (2, 8)]
    aggressive = _method(make_config, max_trials=64, mode="aggressive")
    assert [b[:2] for b in _brackets(aggressive)] == [(4, 64)]


@pytest.mark.parametrize("mct", [0, 1, 5, 16])
def test_a_full_search_runs_max_trials_and_shuts_down_once(make_config, mct):
    method = _method(make_config, max_trials=40, max_concurrent_trials=mct)
    master = RungMaster(method, method.rung_lengths()).start().run()
    assert [c.request_id for c in master.creates] == list(range(1, 41))
    assert master.actions.count(Shutdown()) == 1 and master.actions[-1] == Shutdown()
    assert method.progress() == 1.0
    lengths = [master.trained[i] for i in range(1, 41)]
    assert set(lengths) <= {58, 234, 937}
    assert lengths.count(58) > lengths.count(937)


def test_progress_grows_as_trials_close(make_config):
    method = _method(make_config)
    master = RungMaster(method, method.rung_lengths()).start()
    seen = [method.progress()]
    while master.running:
        master.step()
        seen.append(method.progress())
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
