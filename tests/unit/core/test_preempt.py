"""should_preempt asks the master at most about once a second, and a yes stays a yes."""

from __future__ import annotations

from collections.abc import Callable

from .conftest import FakeRuntime


def test_answers_are_cached_for_about_a_second(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    with remote_init() as ctx:
        assert [ctx.preempt.should_preempt() for _ in range(50)] == [False] * 50
        assert len(fake_runtime.sent("GET", "/preemption")) == 1
        ctx.preempt._asked_at -= 1.5  # a second and a half later
        fake_runtime.preempt = True
        assert ctx.preempt.should_preempt() is True
        assert len(fake_runtime.sent("GET", "/preemption")) == 2


def test_once_preempted_always_preempted(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    fake_runtime.preempt = True
    with remote_init() as ctx:
        assert ctx.preempt.should_preempt() is True
        fake_runtime.preempt = False
        ctx.preempt._asked_at -= 10
        assert ctx.preempt.should_preempt() is True
    assert len(fake_runtime.sent("GET", "/preemption")) == 1


def test_acknowledging_needs_no_request(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    with remote_init() as ctx:
        ctx.preempt.acknowledge_preemption_signal()
    assert fake_runtime.requests == []
