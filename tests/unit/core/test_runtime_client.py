"""RuntimeClient sends each /runtime route of docs/master-api.md with the trial token."""

from __future__ import annotations

import pytest

from det_airflow.errors import APIError

from .conftest import TOKEN, FakeRuntime


def test_every_request_carries_the_trial_token(fake_runtime: FakeRuntime) -> None:
    client = fake_runtime.client()
    client.should_preempt()
    client.report_progress(0.5)
    assert fake_runtime.requests
    assert all(r.authorization == f"Bearer {TOKEN}" for r in fake_runtime.requests)


def test_metrics_are_sent_as_one_batch(fake_runtime: FakeRuntime) -> None:
    reports = [
        {"group": "training", "steps_completed": 1, "metrics": {"loss": 1.0}, "report_time": "t1"},
        {"group": "validation", "steps_completed": 1, "metrics": {"loss": 0.5}, "report_time": "t2"},
    ]
    fake_runtime.client().report_metrics(reports)
    [sent] = fake_runtime.sent("POST", "/runtime/trials/7/metrics")
    assert sent.body == {"reports": reports}


def test_an_empty_batch_sends_nothing(fake_runtime: FakeRuntime) -> None:
    fake_runtime.client().report_metrics([])
    assert fake_runtime.requests == []


def test_routes_and_bodies(fake_runtime: FakeRuntime) -> None:
    fake_runtime.preempt = True
    fake_runtime.best = 0.25
    client = fake_runtime.client()
    assert client.should_preempt() is True
    client.report_progress(0.25)
    client.report_early_exit("INVALID_HP")
    checkpoint = client.register_checkpoint("abc", 10, {"steps_completed": 10}, {"model.pt": 3})
    assert checkpoint["uuid"] == "abc"
    assert client.get_checkpoint("abc")["steps_completed"] == 10
    client.delete_checkpoint("abc")
    assert client.best_validation() == 0.25
    assert client.searcher_operation() == (100, False)
    client.searcher_completed(100, 0.3)
    assert [(r.method, r.path, r.body) for r in fake_runtime.requests] == [
        ("GET", "/runtime/trials/7/preemption", None),
        ("POST", "/runtime/trials/7/progress", {"progress": 0.25}),
        ("POST", "/runtime/trials/7/early_exit", {"reason": "INVALID_HP"}),
        (
            "POST",
            "/runtime/trials/7/checkpoints",
            {
                "uuid": "abc",
                "steps_completed": 10,
                "metadata": {"steps_completed": 10},
                "resources": {"model.pt": 3},
            },
        ),
        ("GET", "/runtime/checkpoints/abc", None),
        ("DELETE", "/runtime/checkpoints/abc", None),
        ("GET", "/runtime/trials/7/best_validation", None),
        ("GET", "/runtime/trials/7/searcher/operation", None),
        ("POST", "/runtime/trials/7/searcher/completed", {"length": 100, "metric": 0.3}),
    ]


def test_best_validation_is_none_before_any_validation(fake_runtime: FakeRuntime) -> None:
    assert fake_runtime.client().best_validation() is None


def test_master_errors_become_api_errors_with_its_message(fake_runtime: FakeRuntime) -> None:
    with pytest.raises(APIError, match="checkpoint nope not found") as info:
        fake_runtime.client().get_checkpoint("nope")
    assert info.value.status_code == 404


def test_a_refused_trial_token_says_so(fake_runtime: FakeRuntime) -> None:
    import httpx

    client = fake_runtime.client()
    client._session._client._transport = httpx.MockTransport(
        lambda request: httpx.Response(401, json={"detail": "bad token"})
    )
    with pytest.raises(APIError, match="refused this trial's token") as info:
        client.should_preempt()
    assert info.value.status_code == 401
