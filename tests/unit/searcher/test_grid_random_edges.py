"""Random and grid search at their edges: progress, failures, and passing sampler options on."""

from __future__ import annotations

import optuna
import pytest

from det_airflow.config._types import CategoricalHP
from det_airflow.searcher import ExitedReason, Shutdown, make_search_method

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_random_search_names_its_study_as_asked(make_config):
    config = make_config("random", max_trials=2, sampler="tpe")
    assert make_search_method(config, study_name="det-experiment-9").sampler.study_name == "det-experiment-9"


def test_an_errored_random_trial_counts_once_toward_progress(make_config):
    method = make_search_method(make_config("random", max_trials=4, max_concurrent_trials=2))
    method.initial_trials()
    method.trial_exited_early(1, ExitedReason.ERRORED)
    assert method.progress() == 0.25


def test_a_repeated_exit_does_not_advance_random_progress(make_config):
    method = make_search_method(make_config("random", max_trials=4, max_concurrent_trials=2))
    method.initial_trials()
    method.trial_exited(1)
    assert method.trial_exited(1) == []
    assert method.progress() == 0.25


def test_a_grid_whose_every_trial_errored_shuts_down_as_a_failure(make_config):
    method = make_search_method(make_config("grid", {"x": CategoricalHP((1, 2))}, max_concurrent_trials=1))
    method.initial_trials()
    method.trial_exited_early(1, ExitedReason.ERRORED)
    assert method.trial_exited_early(2, ExitedReason.INVALID_HP) == [Shutdown(failure=True)]


def test_a_grid_with_a_finished_trial_shuts_down_as_a_success(make_config):
    method = make_search_method(make_config("grid", {"x": CategoricalHP((1, 2))}, max_concurrent_trials=1))
    method.initial_trials()
    method.trial_exited_early(1, ExitedReason.ERRORED)
    assert method.trial_exited(2) == [Shutdown(failure=False)]


def test_random_search_without_max_trials_is_a_bug_the_config_loader_prevents(make_config):
    with pytest.raises(AssertionError, match="^the config loader requires max_trials for random$"):
        make_search_method(make_config("random")).initial_trials()
