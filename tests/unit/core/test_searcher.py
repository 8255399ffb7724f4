"""searcher.operations(): one operation per length the master hands out, until it says the trial is done."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from det_airflow import core, trial_env
from det_airflow.errors import DetError

from .conftest import FakeRuntime


def test_the_master_gives_the_length_and_ends_the_search(
    remote_init: Callable, fake_runtime: FakeRuntime
) -> None:
    fake_runtime.length = 300
    with remote_init() as ctx:
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            op.report_progress(150)
            op.report_completed(0.25)
    assert lengths == [300]
    assert [r.body for r in fake_runtime.sent("POST", "/progress")] == [{"progress": 0.5}]
    assert [r.body for r in fake_runtime.sent("POST", "/searcher/completed")] == [
        {"length": 300, "metric": 0.25}
    ]


def test_a_trial_already_done_gets_no_operation(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    fake_runtime.op_completed = True
    with remote_init() as ctx:
        assert list(ctx.searcher.operations()) == []


def test_a_master_that_repeats_a_completed_length_ends_the_loop(
    remote_init: Callable, fake_runtime: FakeRuntime
) -> None:
    fake_runtime.complete_on_report = False
    with remote_init() as ctx:
        ops = []
        for op in ctx.searcher.operations():
            ops.append(op)
            op.report_completed(1.0)
            if len(ops) == 3:  # a runaway loop stops here instead of hanging the suite
                break
    assert [op.length for op in ops] == [100]
    assert len(fake_runtime.sent("GET", "/searcher/operation")) == 2


def test_an_operation_must_be_completed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with core.init() as ctx, pytest.raises(DetError, match="without report_completed"):
        for _op in ctx.searcher.operations():
            pass


def test_leaving_the_loop_early_is_fine(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    with remote_init() as ctx:
        for _op in ctx.searcher.operations():
            break  # e.g. preempted: checkpoint and exit 0
    assert fake_runtime.sent("POST", "/searcher/completed") == []


def test_off_cluster_one_operation_of_the_config_length(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = {"searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 42}}}
    with core.init(config=config) as ctx:
        ops = list(_complete_all(ctx))
    assert ops == [42]


def test_off_cluster_a_bare_integer_length(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with core.init(config={"searcher": {"max_length": 7}}) as ctx:
        assert list(_complete_all(ctx)) == [7]


def test_off_cluster_without_a_config_one_operation_of_length_1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with core.init() as ctx:
        assert list(_complete_all(ctx)) == [1]


def test_test_mode_trains_one_unit(on_trial: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    on_trial(master=None)
    monkeypatch.setenv(trial_env.TEST_MODE, "1")
    with core.init() as ctx:
        assert ctx.test_mode
        assert list(_complete_all(ctx)) == [1]


def test_a_local_trial_uses_its_config_over_the_argument(on_trial: Callable) -> None:
    on_trial(master=None)  # max_length 100 in the trial's config
    with core.init(config={"searcher": {"max_length": 5}}) as ctx:
        assert list(_complete_all(ctx)) == [100]


def _complete_all(ctx: core.Context):  # type: ignore[no-untyped-def]
    for op in ctx.searcher.operations():
        yield op.length
        op.report_completed(0.0)
