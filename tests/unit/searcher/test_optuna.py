"""Optuna samplers (a det-airflow extension): search space, ask/tell, and reattaching to a study."""

from __future__ import annotations

import json
import sys

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from det_airflow.config._types import CategoricalHP, ConstHP, IntHP, Length, LogHP
from det_airflow.searcher import (
    ExitedReason,
    SearcherError,
    Shutdown,
    load_search_method,
    make_search_method,
)
from det_airflow.searcher._optuna import OptunaSampler, default_study_name, search_space

from .conftest import HPARAMS, FakeMaster, RungMaster

optuna.logging.set_verbosity(optuna.logging.WARNING)

ODD = {
    "nested": {"deep": {"choice": CategoricalHP(([1, 2], {"a": 1}, None))}},
    "same": CategoricalHP((1, True, 1.0)),
    "fixed": ConstHP({"k": [1]}),
    "width": IntHP(8, 64),
}


def test_hyperparameters_map_to_optuna_distributions():
    space = search_space(HPARAMS)
    assert space == {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "layers": IntDistribution(1, 4),
        "optimizer.name": CategoricalDistribution(("sgd", "adam")),
        "optimizer.momentum": FloatDistribution(0.8, 0.99),
    }  # batch_size is a constant: Optuna never sees it
    assert search_space({"lr": LogHP(0, 3, base=2)})["lr"] == FloatDistribution(1.0, 8.0, log=True)


def test_categorical_values_optuna_cannot_hold_go_by_their_json_text():
    space = search_space(ODD)
    assert space["nested.deep.choice"].choices == ("[1, 2]", '{"a": 1}', "null")
    assert space["same"].choices == ("1", "true", "1.0")  # one choice to Optuna's ==


@pytest.mark.parametrize("sampler", ["tpe", "cmaes", "qmc"])
def test_each_sampler_asks_hyperparameters_within_the_space(make_config, sampler):
    pytest.importorskip("cmaes") if sampler == "cmaes" else None
    hparams = {**HPARAMS, **ODD}
    config = make_config("random", hparams, max_trials=14, max_concurrent_trials=2, sampler=sampler)
    creates = FakeMaster(make_search_method(config)).start().run().creates
    assert len(creates) == 14
    for c in creates:
        h = c.hparams
        assert list(h) == list(hparams)
        assert 1e-4 <= h["lr"] <= 0.1 and h["layers"] in range(1, 5) and isinstance(h["layers"], int)
        assert h["optimizer"]["name"] in ("sgd", "adam") and 0.8 <= h["optimizer"]["momentum"] <= 0.99
        assert h["batch_size"] == 32 and h["fixed"] == {"k": [1]} and 8 <= h["width"] <= 64
        assert h["nested"]["deep"]["choice"] in ([1, 2], {"a": 1}, None)
        assert repr(h["same"]) in ("1", "True", "1.0")


@pytest.mark.parametrize("sampler", ["tpe", "qmc"])
def test_the_same_seed_asks_the_same_trials(make_config, sampler):
    def creates(seed):
        config = make_config("random", max_trials=12, max_concurrent_trials=3, sampler=sampler, seed=seed)
        return FakeMaster(make_search_method(config)).start().run().creates

    assert creates(5) == creates(5)
    assert creates(5) != creates(6)


def test_the_study_hears_reports_stops_completions_and_failures(make_config):
    config = make_config(
        "async_halving",
        max_trials=8,
        num_rungs=2,
        divisor=2,
        max_length=Length("batches", 100),
        max_concurrent_trials=2,
        sampler="tpe",
    )
    method = make_search_method(config)
    master = RungMaster(method, [50, 100], early={4: ExitedReason.ERRORED}).start().run()
    assert master.actions[-1] == Shutdown()
    study = method.sampler.study
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    trials = {t.number: t for t in study.get_trials()}
    assert len(trials) == 8
    for number, trial in trials.items():
        request_id = number + 1
        reached = master.trained[request_id]
        if request_id == 4:
            assert trial.state is TrialState.FAIL
        elif reached == 100:
            assert trial.state is TrialState.COMPLETE and set(trial.intermediate_values) == {50, 100}
            assert trial.value == trial.intermediate_values[100]
        else:
            assert trial.state is TrialState.PRUNED and list(trial.intermediate_values) == [50]
            assert trial.value == trial.intermediate_values[50]


def test_larger_is_better_maximizes(make_config):
    config = make_config("random", max_trials=1, sampler="tpe", smaller_is_better=False, metric="accuracy")
    method = make_search_method(config)
    method.initial_trials()
    method.validation_completed(1, {"accuracy": 0.7}, 10)
    method.trial_exited(1)
    assert method.sampler.study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert method.sampler.study.best_value == 0.7


def _asha_tpe(make_config, **fields):
    fields = {
        "max_trials": 12,
        "divisor": 3,
        "max_length": Length("batches", 90),
        "max_concurrent_trials": 3,
        "sampler": "tpe",
    } | fields
    return make_config("adaptive_asha", **fields)


def _master(method):
    return RungMaster(method, method.rung_lengths(), early={5: ExitedReason.ERRORED})


def test_a_reloaded_search_reattaches_to_its_study_and_goes_on_identically(make_config, tmp_path):
    config = _asha_tpe(make_config)
    whole = f"sqlite:///{tmp_path / 'whole.db'}"
    uninterrupted = _master(make_search_method(config, optuna_storage=whole)).start().run()

    split = f"sqlite:///{tmp_path / 'split.db'}"
    resumed = _master(make_search_method(config, optuna_storage=split)).start().run(9)
    state = json.loads(json.dumps(resumed.method.state_dict(), allow_nan=False))
    resumed.method = load_search_method(config, state, optuna_storage=split)
    resumed.run()

    assert resumed.actions == uninterrupted.actions and resumed.actions[-1] == Shutdown()
    studies = optuna.get_all_study_summaries(split)
    assert [s.study_name for s in studies] == [default_study_name(config)]
    assert studies[0].n_trials == 12
    study = optuna.load_study(study_name=default_study_name(config), storage=split)
    assert all(t.state.is_finished() for t in study.get_trials())


def test_an_explicit_study_name_is_kept_in_the_state(make_config, tmp_path):
    config = _asha_tpe(make_config)
    url = f"sqlite:///{tmp_path / 'named.db'}"
    method = make_search_method(config, optuna_storage=url, study_name="det-experiment-7")
    method.initial_trials()
    state = json.loads(json.dumps(method.state_dict()))
    reloaded = load_search_method(config, state, optuna_storage=url)  # no name given: from the state
    assert reloaded.sampler.study_name == "det-experiment-7"
    reloaded.validation_completed(1, {"validation_loss": 0.3}, 10)
    assert optuna.load_study(study_name="det-experiment-7", storage=url).trials[0].intermediate_values == {
        10: 0.3
    }
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["det-experiment-7"]


def test_reloading_without_the_storage_is_a_searcher_error(make_config, tmp_path):
    config = _asha_tpe(make_config)
    method = make_search_method(config)
    method.initial_trials()
    with pytest.raises(SearcherError, match="optuna_storage it was made with"):
        load_search_method(config, json.loads(json.dumps(method.state_dict())))
    with pytest.raises(SearcherError, match="not in the given storage"):
        load_search_method(config, method.state_dict(), optuna_storage=f"sqlite:///{tmp_path / 'other.db'}")


def test_cmaes_without_its_package_is_a_searcher_error(make_config, monkeypatch):
    monkeypatch.setitem(sys.modules, "cmaes", None)
    with pytest.raises(SearcherError, match="needs the 'cmaes' package"):
        make_search_method(make_config("random", max_trials=2, sampler="cmaes"))


def test_the_default_study_name_depends_on_the_search_and_seed(make_config):
    assert default_study_name(_asha_tpe(make_config)) == default_study_name(_asha_tpe(make_config))
    assert default_study_name(_asha_tpe(make_config)) != default_study_name(_asha_tpe(make_config, seed=8))
    assert default_study_name(_asha_tpe(make_config)).startswith("det-adaptive_asha-tpe-")
    assert isinstance(make_search_method(_asha_tpe(make_config)).sampler, OptunaSampler)


def test_a_non_numeric_metric_is_a_searcher_error_for_optuna(make_config):
    method = make_search_method(make_config("random", max_trials=1, sampler="tpe"))
    method.initial_trials()
    with pytest.raises(SearcherError, match="must be a number"):
        method.validation_completed(1, {"validation_loss": "n/a"}, 10)
