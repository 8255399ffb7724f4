"""TrainContext: metrics reach the backend in order; training reports are batched, validation ones not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from det_airflow import core
from det_airflow.core import DistributedContext, EarlyExitReason, TrainContext
from det_airflow.core._local import LocalBackend
from det_airflow.errors import DetError

from .conftest import FakeRuntime


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_training_reports_are_buffered_until_a_validation(
    remote_init: Callable, fake_runtime: FakeRuntime
) -> None:
    with remote_init() as ctx:
        for step in range(1, 6):
            ctx.train.report_training_metrics(step, {"loss": np.float32(1.0 / step)})
        assert fake_runtime.sent("POST", "/metrics") == []  # reporting every batch costs no request
        ctx.train.report_validation_metrics(5, {"validation_loss": 0.3})
        [batch] = fake_runtime.sent("POST", "/metrics")
    reports = batch.body["reports"]
    assert [(r["group"], r["steps_completed"]) for r in reports] == [("training", s) for s in range(1, 6)] + [
        ("validation", 5)
    ]
    assert reports[0]["metrics"] == {"loss": 1.0} and reports[0]["report_time"].endswith("+00:00")


def test_buffered_reports_are_flushed_on_close(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    with remote_init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
    [batch] = fake_runtime.sent("POST", "/metrics")
    assert batch.body["reports"][0]["group"] == "training"


def test_a_full_buffer_is_flushed(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    train = TrainContext(DistributedContext(), backend, flush_every=3, flush_interval=1e9)
    for step in range(1, 5):
        train.report_training_metrics(step, {"loss": 1.0})
    assert [r["steps_completed"] for r in _lines(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    train.close()
    assert len(_lines(tmp_path / "metrics.jsonl")) == 4


def test_an_old_buffer_is_flushed(tmp_path: Path) -> None:
    train = TrainContext(DistributedContext(), LocalBackend(tmp_path), flush_interval=0.0)
    train.report_training_metrics(1, {"loss": 1.0})
    assert len(_lines(tmp_path / "metrics.jsonl")) == 1


def test_custom_groups_are_sent_at_once(tmp_path: Path) -> None:
    train = TrainContext(DistributedContext(), LocalBackend(tmp_path))
    train.report_metrics("inference", 3, {"latency": 0.1})
    assert _lines(tmp_path / "metrics.jsonl")[0]["group"] == "inference"


def test_progress_is_clamped_and_early_exit_named(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    with remote_init() as ctx:
        ctx.train.report_progress(1.0000001)
        ctx.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
        ctx.train.report_early_exit("ERRORED")
    assert [r.body for r in fake_runtime.sent("POST", "/progress")] == [{"progress": 1.0}]
    assert [r.body["reason"] for r in fake_runtime.sent("POST", "/early_exit")] == [
        "USER_REQUESTED_STOP",
        "ERRORED",
    ]


def test_an_unknown_early_exit_reason_is_refused(tmp_path: Path) -> None:
    train = TrainContext(DistributedContext(), LocalBackend(tmp_path))
    with pytest.raises(ValueError):
        train.report_early_exit("BORED")


def test_best_validation_comes_from_the_master(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    fake_runtime.best = 0.125
    with remote_init() as ctx:
        assert ctx.train.get_experiment_best_validation() == 0.125


def test_metrics_that_are_no_numbers_fail_at_the_report(tmp_path: Path) -> None:
    with core.init() as ctx, pytest.raises(DetError, match="metric 'model'"):
        ctx.train.report_training_metrics(1, {"model": object()})
