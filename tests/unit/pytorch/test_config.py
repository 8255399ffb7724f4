"""Periods in batches, and the Trainer's defaults read from an experiment config."""

from __future__ import annotations

import pytest

from det_airflow.config import config_to_dict, parse_config
from det_airflow.errors import ConfigError, DetError
from det_airflow.pytorch import Batch, Epoch
from det_airflow.pytorch._config import read_defaults
from det_airflow.pytorch._period import period_in_batches


def test_periods_in_batches() -> None:
    assert Batch(7).to_batches(epoch_length=13) == 7
    assert Epoch(2).to_batches(epoch_length=13) == 26
    assert period_in_batches(None, 13, name="p") is None
    with pytest.raises(DetError, match="at least one batch"):
        period_in_batches(Batch(0), 13, name="p")
    with pytest.raises(DetError, match="expected Batch"):
        period_in_batches(5, 13, name="p")  # type: ignore[arg-type]
    with pytest.raises(DetError, match="integer >= 0"):
        Batch(-1)


def test_defaults_without_a_config() -> None:
    defaults = read_defaults({}, {})
    assert defaults.reporting_period == Batch(100)
    assert defaults.checkpoint_policy == "best"
    assert (defaults.validation_period, defaults.checkpoint_period, defaults.max_time) == (None, None, None)
    assert defaults.searcher_length_unit is None and defaults.metric is None


def test_defaults_from_a_normalized_seed_era_config() -> None:
    cfg = parse_config(
        """
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 32}
searcher: {name: single, metric: acc, smaller_is_better: false, max_length: {records: 3200}}
min_validation_period: {epochs: 1}
min_checkpoint_period: {records: 640}
scheduling_unit: 20
records_per_epoch: 1600
perform_initial_validation: true
checkpoint_policy: all
"""
    )
    defaults = read_defaults(config_to_dict(cfg), {"global_batch_size": 32})
    assert defaults.searcher_length_unit == "records"
    assert defaults.unit_length("records", 3200, where="x") == Batch(100)
    assert defaults.validation_period == Batch(50)  # 1600 records / 32
    assert defaults.checkpoint_period == Batch(20)
    assert defaults.reporting_period == Batch(20)
    assert (defaults.checkpoint_policy, defaults.step_zero_validation) == ("all", True)
    assert (defaults.metric, defaults.smaller_is_better) == ("acc", False)


def test_epochs_without_records_per_epoch_stay_epochs() -> None:
    defaults = read_defaults(
        {"searcher": {"max_length": {"epochs": 3}}, "min_validation_period": {"epochs": 1}}, {}
    )
    assert defaults.searcher_length_unit == "epochs"
    assert defaults.unit_length("epochs", 3, where="x") == Epoch(3)
    assert defaults.validation_period == Epoch(1)


def test_max_time_in_a_time_metric_the_trainer_counts() -> None:
    assert read_defaults({"searcher": {"time_metric": "batches", "max_time": 50}}, {}).max_time == Batch(50)
    assert read_defaults({"searcher": {"time_metric": "epochs", "max_time": 2}}, {}).max_time == Epoch(2)
    assert read_defaults({"searcher": {"time_metric": "f1_steps", "max_time": 2}}, {}).max_time is None
    assert read_defaults({"searcher": {"max_length": 40}}, {}).searcher_length_unit == "batches"


def test_records_need_a_global_batch_size() -> None:
    with pytest.raises(ConfigError, match="global_batch_size"):
        read_defaults({"min_validation_period": {"records": 100}}, {})


def test_an_unknown_checkpoint_policy_is_refused() -> None:
    with pytest.raises(DetError, match="checkpoint_policy"):
        read_defaults({"checkpoint_policy": "sometimes"}, {})
