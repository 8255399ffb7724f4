"""The experiment-config fields the Core API reads: every shape of searcher.max_length, max_time,
the searcher metric's defaults and checkpoint_storage."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow import core
from det_airflow.core._config import checkpoint_storage, searcher_length, searcher_metric


@pytest.mark.parametrize(
    "searcher, length",
    [
        ({"max_length": {"unit": "batches", "value": 250}}, 250),  # the normalized form
        ({"max_length": {"batches": 100}}, 100),
        ({"max_length": {"records": 640}}, 640),
        ({"max_length": {"epochs": 3}}, 3),
        ({"max_length": 7}, 7),
        ({"max_length": {"minutes": 5}}, None),
        ({"max_time": 60}, 60),
        ({"max_time": 90.9}, 90),
        ({"max_time": True}, None),
        ({}, None),
    ],
)
def test_searcher_length_reads_each_shape_a_user_writes(searcher: dict[str, Any], length: int | None) -> None:
    assert searcher_length({"searcher": searcher}) == length


@pytest.mark.parametrize(
    "searcher, length",
    [
        ({"max_length": {"unit": "records", "value": 12}}, 12),
        ({"max_length": {"records": 640}}, 640),
        ({"max_length": {"epochs": 3}}, 3),
        ({"max_time": 60}, 60),
    ],
)
def test_off_cluster_the_operation_has_the_config_length(searcher: dict[str, Any], length: int) -> None:
    with core.init(config={"searcher": {"name": "single", "metric": "loss", **searcher}}) as ctx:
        op = next(iter(ctx.searcher.operations()))
        assert op.length == length


@pytest.mark.parametrize(
    "searcher, answer",
    [
        ({"metric": "validation_loss"}, ("validation_loss", True)),
        ({"metric": "accuracy", "smaller_is_better": False}, ("accuracy", False)),
        ({"metric": ""}, (None, True)),
        ({}, (None, True)),
    ],
)
def test_searcher_metric_defaults_to_smaller_is_better(
    searcher: dict[str, Any], answer: tuple[str | None, bool]
) -> None:
    assert searcher_metric({"searcher": searcher}) == answer


def test_without_a_searcher_metric_no_value_is_the_best() -> None:
    with core.init(config={"searcher": {"name": "single"}}) as ctx:
        ctx.train.report_validation_metrics(1, {"None": 0.5})
        assert ctx.train.get_experiment_best_validation() is None


def test_checkpoint_storage_must_be_a_mapping() -> None:
    assert checkpoint_storage({"checkpoint_storage": "/mnt/ckpts"}) is None
    assert checkpoint_storage({}) is None
    assert checkpoint_storage({"checkpoint_storage": {"type": "shared_fs"}}) == {"type": "shared_fs"}
