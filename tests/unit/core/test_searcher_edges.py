"""Searcher operations at their edges: a zero or negative length, a repeated length, double completion."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from det_airflow import core
from det_airflow.errors import DetError

from .conftest import FakeRuntime, Opaque


def test_an_operation_is_not_completed_until_reported(remote_init: Callable) -> None:
    with remote_init() as ctx:
        op = next(iter(ctx.searcher.operations()))
        assert op.completed is False
        op.report_completed(0.5)
        assert op.completed is True


def test_progress_of_an_operation_of_length_zero_is_complete(
    remote_init: Callable, fake_runtime: FakeRuntime
) -> None:
    fake_runtime.length = 0
    with remote_init() as ctx:
        for op in ctx.searcher.operations():
            op.report_progress(0)
            op.report_completed(0.5)
    assert [r.body for r in fake_runtime.sent("POST", "/progress")] == [{"progress": 1.0}]


def test_completing_an_operation_twice_is_refused(remote_init: Callable) -> None:
    with remote_init() as ctx:
        op = next(iter(ctx.searcher.operations()))
        op.report_completed(0.5)
        with pytest.raises(DetError) as raised:
            op.report_completed(0.4)
    assert str(raised.value) == "report_completed was already called for this operation"


def test_a_searcher_metric_that_is_no_number_is_refused_by_name(remote_init: Callable) -> None:
    with remote_init() as ctx:
        op = next(iter(ctx.searcher.operations()))
        with pytest.raises(DetError) as raised:
            op.report_completed(Opaque())
    assert str(raised.value) == (
        "searcher metric: a Opaque cannot be reported; report numbers, strings or lists"
    )


def test_a_negative_length_gives_no_operation() -> None:
    with core.init(config={"searcher": {"name": "single", "max_length": -1}}) as ctx:
        assert list(ctx.searcher.operations()) == []
