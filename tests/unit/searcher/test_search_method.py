"""What every search method does the same way: validation checks, repeated and unknown events."""

from __future__ import annotations

import pytest

from det_airflow.config._types import Length
from det_airflow.errors import DetError
from det_airflow.searcher import ExitedReason, SearcherError, Shutdown, make_search_method

METHODS = [("single", {}), ("random", {"max_trials": 3}), ("grid", {})]
ASHA = [
    ("adaptive_asha", {"max_trials": 4, "max_length": Length("batches", 100)}),
    ("async_halving", {"max_trials": 4, "num_rungs": 2, "max_length": Length("batches", 100)}),
    (
        "async_halving",
        {"max_trials": 4, "num_rungs": 2, "max_length": Length("batches", 100), "stop_once": False},
    ),
]


@pytest.mark.parametrize(("name", "fields"), ASHA)
def test_validation_without_the_searcher_metric_names_what_was_reported(make_config, name, fields):
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    with pytest.raises(SearcherError) as err:
        method.validation_completed(1, {"loss": 0.1, "accuracy": 0.9}, 100)
    assert (
        str(err.value)
        == "validation metric 'validation_loss' not found in the reported metrics (accuracy, loss)"
    )
    assert isinstance(err.value, DetError)


@pytest.mark.parametrize(("name", "fields"), METHODS)
def test_validation_reports_do_not_change_decisions(make_config, name, fields):
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    assert method.trial_created(1) == []
    assert method.validation_completed(1, {"validation_loss": 0.1}, 100) == []


def test_empty_metrics_are_reported_as_none(make_config):
    name, fields = ASHA[0]
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    with pytest.raises(SearcherError, match=r"\(none\)"):
        method.validation_completed(1, {}, 0)


def test_a_repeated_exit_event_changes_nothing(make_config):
    method = make_search_method(make_config("random", max_trials=2, max_concurrent_trials=1))
    method.initial_trials()
    assert [a.request_id for a in method.trial_exited_early(1, ExitedReason.ERRORED)] == [2]
    assert method.trial_exited(1) == []
    assert method.trial_exited(2) == [Shutdown()]
    assert method.trial_exited(2) == []


def test_an_exit_for_a_trial_never_created_is_a_bug(make_config):
    method = make_search_method(make_config("random", max_trials=2))
    method.initial_trials()
    with pytest.raises(ValueError, match="request id 9"):
        method.trial_exited(9)


@pytest.mark.parametrize(("name", "fields"), METHODS)
def test_methods_without_rungs_train_to_max_length(make_config, name, fields):
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    assert method.operation_length(1) is None
    with pytest.raises(ValueError, match="request id 99"):
        method.operation_length(99)


@pytest.mark.parametrize(("name", "fields"), ASHA)
def test_asha_operation_lengths(make_config, name, fields):
    method = make_search_method(make_config(name, **fields))
    method.initial_trials()
    expected = 100 if fields.get("stop_once", True) else method.brackets[0].units[0]
    assert method.operation_length(1) == expected
