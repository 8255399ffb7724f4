"""Optuna samplers at their edges: exact proposals per seed, odd categoricals, what the study is told."""

from __future__ import annotations

import datetime
import json
import logging
import random
import re
import sys
import warnings

import optuna
import pytest
from optuna.trial import TrialState

from det_airflow.config._types import CategoricalHP, ConstHP, IntHP, LogHP
from det_airflow.searcher import Create, ExitedReason, SearcherError, load_search_method, make_search_method
from det_airflow.searcher._optuna import default_study_name, search_space

from .conftest import HPARAMS

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {
    "lr": LogHP(-4, -1),
    "width": IntHP(8, 64),
    "opt": {"name": CategoricalHP(("sgd", "adam", "rmsprop"))},
}

# Trials asked one after another with experiment_seed 7, each told a loss of width / 100.
PROPOSALS = {
    "tpe": [(0.000417, 52, "sgd"), (0.006361, 15, "sgd"), (0.067547, 59, "rmsprop"), (0.005598, 52, "sgd")],
    "cmaes": [
        (0.000417, 52, "sgd"),
        (0.000814, 29, "rmsprop"),
        (0.003166, 33, "sgd"),
        (0.001807, 35, "adam"),
    ],
    "qmc": [(0.000417, 52, "sgd"), (0.005467, 50, "rmsprop"), (0.000307, 23, "adam"), (0.000736, 53, "adam")],
}


def _sequential(make_config, sampler, hyperparameters=SPACE, trials=4, seed=7):
    config = make_config(
        "random", hyperparameters, max_trials=trials, max_concurrent_trials=1, sampler=sampler, seed=seed
    )
    method = make_search_method(config)
    actions, hparams = method.initial_trials(), []
    while creates := [a for a in actions if isinstance(a, Create)]:
        h = creates[0].hparams
        hparams.append(h)
        method.validation_completed(creates[0].request_id, {"validation_loss": h["width"] / 100}, 10)
        actions = method.trial_exited(creates[0].request_id)
    return method, hparams


@pytest.fixture
def optuna_log(caplog):
    optuna.logging.enable_propagation()
    caplog.set_level(logging.WARNING, logger="optuna")
    yield caplog
    optuna.logging.disable_propagation()


@pytest.mark.parametrize("sampler", ["tpe", "cmaes", "qmc"])
def test_a_seed_asks_exactly_these_trials_without_logging_warnings(make_config, optuna_log, sampler):
    _, hparams = _sequential(make_config, sampler)
    assert [(round(h["lr"], 6), h["width"], h["opt"]["name"]) for h in hparams] == PROPOSALS[sampler]
    assert [r.getMessage() for r in optuna_log.records] == []


def test_without_an_experiment_seed_each_search_draws_its_own(make_config):
    first = [_sequential(make_config, "tpe", seed=None)[1] for _ in range(2)]
    assert first[0] != first[1]


def test_the_drawn_seed_is_a_31_bit_number_kept_in_the_state(make_config, monkeypatch):
    class HighestDraw:
        def randrange(self, stop):
            return stop - 1

    monkeypatch.setattr(random, "SystemRandom", HighestDraw)
    method = make_search_method(make_config("random", max_trials=1, sampler="tpe", seed=None))
    assert method.state_dict()["sampler"]["seed"] == 2**31 - 1


def test_cmaes_without_its_package_says_how_to_get_it(make_config, monkeypatch):
    monkeypatch.setitem(sys.modules, "cmaes", None)
    with pytest.raises(SearcherError) as err:
        make_search_method(make_config("random", max_trials=2, sampler="cmaes"))
    assert str(err.value) == (
        "searcher.sampler 'cmaes' needs the 'cmaes' package; install it (pip install cmaes) "
        "or choose another sampler"
    )


def test_dict_choices_go_by_their_sorted_json_text():
    space = search_space({"c": CategoricalHP(({"b": 1, "a": [2]}, None))})
    assert space["c"].choices == ('{"a": [2], "b": 1}', "null")


def test_choices_json_cannot_write_go_by_their_repr():
    space = search_space({"day": CategoricalHP((datetime.date(2024, 1, 2), "x"))})
    assert space["day"].choices == ('"datetime.date(2024, 1, 2)"', '"x"')


def test_choices_with_the_same_json_text_are_told_apart_by_position(make_config):
    assert search_space({"c": CategoricalHP(([1], (1,)))})["c"].choices == ("0: [1]", "1: [1]")
    _, hparams = _sequential(make_config, "tpe", {**SPACE, "c": CategoricalHP(([1], (1,)))}, trials=6)
    assert {repr(h["c"]) for h in hparams} == {"[1]", "(1,)"}


def test_changing_a_trials_hyperparameters_leaves_the_next_trials_alone(make_config):
    hparams = {
        "width": IntHP(8, 64),
        "c": CategoricalHP(({"a": [1]}, {"a": [2]})),
        "fixed": ConstHP({"k": [1]}),
    }
    config = make_config("random", hparams, max_trials=8, max_concurrent_trials=8, sampler="tpe")
    method = make_search_method(config)
    seen = []
    for create in method.initial_trials():
        seen.append(json.dumps(create.hparams, sort_keys=True))
        create.hparams["c"]["a"].append(99)
        create.hparams["fixed"]["k"].append(99)
    assert all('"fixed": {"k": [1]}' in s and "99" not in s for s in seen)
    assert config.hyperparameters["c"].vals == ({"a": [1]}, {"a": [2]})
    assert config.hyperparameters["fixed"].val == {"k": [1]}


def test_the_default_study_name_ignores_the_order_hyperparameters_are_listed_in(make_config):
    reordered = dict(reversed(list(HPARAMS.items())))
    name = default_study_name(make_config("random", max_trials=2, sampler="tpe"))
    assert name == default_study_name(make_config("random", reordered, max_trials=2, sampler="tpe"))
    assert re.fullmatch("det-random-tpe-[0-9a-f]{12}", name)


def test_the_default_study_name_takes_values_json_cannot_write(make_config):
    config = make_config("random", {"d": CategoricalHP((datetime.date(2024, 1, 2), None))}, sampler="qmc")
    assert re.fullmatch("det-random-qmc-[0-9a-f]{12}", default_study_name(config))


def _one_trial(make_config, storage=None, **fields):
    config = make_config("random", max_trials=1, sampler="tpe", **fields)
    method = make_search_method(config, optuna_storage=storage)
    method.initial_trials()
    return config, method


def test_the_state_keeps_each_open_trials_last_step_and_value(make_config):
    _, method = _one_trial(make_config)
    trial_id = method.sampler.study.trials[0]._trial_id
    assert method.state_dict()["sampler"]["open"] == {"1": [0, trial_id, -1, None]}
    method.validation_completed(1, {"validation_loss": 0.25}, 10)
    assert method.state_dict()["sampler"]["open"] == {"1": [0, trial_id, 10, 0.25]}


@pytest.mark.parametrize(("smaller_is_better", "stored"), [(True, "inf"), (False, "-inf")])
def test_a_nan_metric_is_kept_as_the_worst_value_in_strict_json(make_config, smaller_is_better, stored):
    _, method = _one_trial(make_config, smaller_is_better=smaller_is_better)
    method.validation_completed(1, {"validation_loss": float("nan")}, 10)
    state = json.loads(json.dumps(method.state_dict(), allow_nan=False))
    assert state["sampler"]["open"]["1"][2:] == [10, stored]
    assert method.sampler.study.trials[0].intermediate_values == {10: float(stored)}


def test_validations_at_zero_and_one_unit_reach_the_study(make_config):
    _, method = _one_trial(make_config)
    method.validation_completed(1, {"validation_loss": 0.9}, 0)
    method.validation_completed(1, {"validation_loss": 0.8}, 1)
    assert method.sampler.study.trials[0].intermediate_values == {0: 0.9, 1: 0.8}


def test_a_repeated_or_earlier_step_is_not_reported_again(make_config):
    _, method = _one_trial(make_config)
    method.validation_completed(1, {"validation_loss": 0.5}, 10)
    method.validation_completed(1, {"validation_loss": 0.3}, 10)
    method.validation_completed(1, {"validation_loss": 0.1}, 5)
    method.trial_exited(1)
    trial = method.sampler.study.trials[0]
    assert trial.intermediate_values == {10: 0.5}
    assert (trial.state, trial.value) == (TrialState.COMPLETE, 0.5)


@pytest.mark.parametrize(
    ("reports", "reason"),
    [
        ([], None),
        ([0.5], ExitedReason.ERRORED),
        ([0.5], ExitedReason.INVALID_HP),
        ([], ExitedReason.USER_CANCELED),
    ],
)
def test_trials_without_a_result_fail_quietly(make_config, reports, reason):
    _, method = _one_trial(make_config)
    for value in reports:
        method.validation_completed(1, {"validation_loss": value}, 10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        method.trial_exited(1) if reason is None else method.trial_exited_early(1, reason)
    assert method.sampler.study.trials[0].state is TrialState.FAIL
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(
    ("reason", "state", "value"),
    [
        (None, TrialState.COMPLETE, 0.5),
        (ExitedReason.USER_CANCELED, TrialState.PRUNED, 0.5),
        (ExitedReason.ERRORED, TrialState.FAIL, None),
    ],
)
def test_an_exit_replayed_after_reloading_an_older_state_keeps_what_the_study_was_told(
    make_config, tmp_path, reason, state, value
):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    config, method = _one_trial(make_config, url)
    method.validation_completed(1, {"validation_loss": 0.5}, 10)
    snapshot = json.loads(json.dumps(method.state_dict()))

    def exit_trial(m):
        return m.trial_exited(1) if reason is None else m.trial_exited_early(1, reason)

    exit_trial(method)
    exit_trial(load_search_method(config, snapshot, optuna_storage=url))
    trial = optuna.load_study(study_name=method.sampler.study_name, storage=url).trials[0]
    assert (trial.state, trial.value) == (state, value)


def test_a_study_reused_for_a_wider_space_samples_the_new_hyperparameters_quietly(make_config, optuna_log):
    storage = optuna.storages.InMemoryStorage()

    def run(hyperparameters):
        config = make_config("random", hyperparameters, max_trials=2, max_concurrent_trials=1, sampler="qmc")
        method = make_search_method(config, optuna_storage=storage, study_name="shared")
        (create,) = method.initial_trials()
        method.validation_completed(create.request_id, {"validation_loss": 0.5}, 10)
        method.trial_exited(create.request_id)
        return create.hparams

    run(SPACE)
    assert 1 <= run({**SPACE, "depth": IntHP(1, 9)})["depth"] <= 9
    assert [r.getMessage() for r in optuna_log.records] == []
