"""The clocks of the Core API (how often the master is asked, when buffered metrics go out) at their
exact limits, and workers other than the chief, which leave the asking to it."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from det_airflow.core import (
    DistributedContext,
    LocalBackend,
    PreemptContext,
    SearcherContext,
    TrainContext,
    _preempt,
    _train,
)
from det_airflow.core._local import read_jsonl
from det_airflow.core._remote import RemoteBackend

from .conftest import FakeRuntime, NonChief


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    fake_time = types.SimpleNamespace(monotonic=clock.monotonic)
    monkeypatch.setattr(_preempt, "time", fake_time)
    monkeypatch.setattr(_train, "time", fake_time)
    return clock


def test_the_chief_asks_the_master_again_one_second_later_by_default(
    clock: Clock, fake_runtime: FakeRuntime
) -> None:
    preempt = PreemptContext(DistributedContext(), RemoteBackend(fake_runtime.client()))
    assert preempt.should_preempt() is False
    clock.now += 0.999
    fake_runtime.preempt = True
    assert preempt.should_preempt() is False  # the cached answer
    assert len(fake_runtime.sent("GET", "/preemption")) == 1
    clock.now += 0.001
    assert preempt.should_preempt() is True
    assert len(fake_runtime.sent("GET", "/preemption")) == 2


def test_a_worker_takes_the_chiefs_answer_without_asking(fake_runtime: FakeRuntime) -> None:
    fake_runtime.preempt = False
    preempt = PreemptContext(NonChief(True), RemoteBackend(fake_runtime.client()))
    assert preempt.should_preempt() is True
    assert fake_runtime.requests == []


def test_a_worker_gets_the_chiefs_operations_without_asking(
    fake_runtime: FakeRuntime, tmp_path: Path
) -> None:
    worker = NonChief((300, False))
    backend = RemoteBackend(fake_runtime.client())
    searcher = SearcherContext(worker, backend, TrainContext(worker, backend))
    lengths = []
    for op in searcher.operations():
        lengths.append(op.length)
        op.report_progress(150)
        op.report_completed(0.5)
    assert lengths == [300]
    assert fake_runtime.requests == []


def test_a_hundred_training_reports_fill_the_default_buffer(clock: Clock, tmp_path: Path) -> None:
    train = TrainContext(DistributedContext(), LocalBackend(tmp_path))
    for step in range(1, 100):
        train.report_training_metrics(step, {"loss": 1.0})
    assert list(read_jsonl(tmp_path / "metrics.jsonl")) == []
    train.report_training_metrics(100, {"loss": 1.0})
    assert [r["steps_completed"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == list(range(1, 101))


def test_a_buffer_ten_seconds_old_is_sent_by_default(clock: Clock, tmp_path: Path) -> None:
    train = TrainContext(DistributedContext(), LocalBackend(tmp_path))
    train.report_training_metrics(1, {"loss": 1.0})
    clock.now += 9.999
    train.report_training_metrics(2, {"loss": 1.0})
    assert list(read_jsonl(tmp_path / "metrics.jsonl")) == []
    clock.now += 0.001
    train.report_training_metrics(3, {"loss": 1.0})
    assert [r["steps_completed"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3]
