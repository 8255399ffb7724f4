"""The Celery workers' host heartbeat: what it sends the master, and that no failure stops a worker."""

from __future__ import annotations

import logging
import threading

import pytest
from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from celery.signals import worker_ready, worker_shutdown

from det_airflow import celery_config
from det_airflow.api.models import HostReport
from det_airflow.celery_config import DET_CELERY_CONFIG, HostHeartbeat, master_client

REPORT = HostReport(slot_type="cpu", slots=2, queue="det-host-worker-1", address="vm")


class FakeClient:
    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.reports: list[tuple[str, HostReport]] = []
        self.left: list[str] = []
        self.closed = False

    def report_host(self, host_id: str, report: HostReport) -> None:
        if self.fail:
            raise self.fail
        self.reports.append((host_id, report))

    def leave_host(self, host_id: str) -> None:
        self.left.append(host_id)

    def close(self) -> None:
        self.closed = True


def heartbeat(*clients: FakeClient | Exception) -> tuple[HostHeartbeat, list[FakeClient]]:
    """A heartbeat whose successive clients (or connection failures) are ``clients``."""
    made: list[FakeClient] = []
    queue = list(clients)

    def factory() -> FakeClient:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        made.append(item)
        return item

    return HostHeartbeat(factory, lambda: ("worker-1", REPORT), interval=0.01), made


def test_the_config_is_the_providers_default() -> None:
    assert DET_CELERY_CONFIG == DEFAULT_CELERY_CONFIG


def test_a_beat_reports_this_hosts_inventory_on_one_client() -> None:
    hb, made = heartbeat(FakeClient())
    assert hb.beat() and hb.beat()
    assert len(made) == 1
    assert made[0].reports == [("worker-1", REPORT), ("worker-1", REPORT)]


def test_a_missing_connection_warns_once_and_is_tried_at_each_beat(caplog: pytest.LogCaptureFixture) -> None:
    missing = LookupError("The conn_id `det_default` isn't defined")
    hb, made = heartbeat(missing, missing, FakeClient())
    with caplog.at_level(logging.INFO, logger="det_airflow.celery_config"):
        assert not hb.beat()
        assert not hb.beat()
        assert hb.beat()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "det_default" in warnings[0].getMessage()
    assert "reaches the master again" in caplog.records[-1].getMessage()
    assert made[0].reports == [("worker-1", REPORT)]


def test_a_failed_report_drops_the_client_and_the_next_beat_reads_the_connection_again() -> None:
    broken = FakeClient(fail=ConnectionError("master away"))
    hb, made = heartbeat(broken, FakeClient())
    assert not hb.beat()
    assert broken.closed
    assert hb.beat()
    assert made[1].reports == [("worker-1", REPORT)]


def test_a_bad_host_setting_does_not_raise() -> None:
    def bad_inventory() -> tuple[str, HostReport]:
        raise ValueError("airflow.cfg [det] host_id: 'a b' must be letters, digits")

    hb = HostHeartbeat(FakeClient, bad_inventory)
    assert not hb.beat()
    assert hb.last_error is not None and "host_id" in hb.last_error


def test_leaving_tells_the_master_only_after_a_report() -> None:
    hb, made = heartbeat(FakeClient(), FakeClient())
    hb.leave()  # never reported: nothing to say
    assert made == []
    hb.beat()
    hb.leave()
    assert made[0].left == ["worker-1"]
    assert made[0].closed


def test_the_thread_beats_until_stopped_then_leaves() -> None:
    client = FakeClient()
    beaten = threading.Event()

    class Recording(FakeClient):
        def report_host(self, host_id: str, report: HostReport) -> None:
            client.reports.append((host_id, report))
            beaten.set()

        def leave_host(self, host_id: str) -> None:
            client.left.append(host_id)

    hb = HostHeartbeat(Recording, lambda: ("worker-1", REPORT), interval=0.01)
    hb.start()
    assert beaten.wait(5)
    hb.stop()
    assert hb._thread is not None and not hb._thread.is_alive()
    assert client.left == ["worker-1"]
    count = len(client.reports)
    threading.Event().wait(0.05)
    assert len(client.reports) == count  # no beat after stop


def test_the_worker_signals_start_and_stop_the_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    class Spy:
        def __init__(self, **_: object) -> None:
            pass

        def start(self) -> None:
            events.append("start")

        def stop(self) -> None:
            events.append("stop")

    monkeypatch.setattr(celery_config, "HostHeartbeat", Spy)
    monkeypatch.setattr(celery_config, "_heartbeat", None)
    worker_ready.send(sender=None)
    worker_ready.send(sender=None)  # one heartbeat per worker process
    worker_shutdown.send(sender=None)
    assert events == ["start", "stop"]


def test_the_master_client_comes_from_the_det_default_connection_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DET_DEFAULT", "det://:service-token@127.0.0.1:8095")
    client = master_client()
    try:
        assert client.session.master == "http://127.0.0.1:8095"
        assert client.session.token == "service-token"
        assert client.session.retry_seconds == celery_config.HEARTBEAT_SECONDS
    finally:
        client.close()


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://broker.internal:6379/0",
        "rediss://broker.internal:6380/0",
        "amqp://guest:guest@rabbit.internal//",
        "amqp://rabbit.internal//",
    ],
)
def test_a_broker_that_lets_anyone_in_is_named_with_the_fix(url: str) -> None:
    problem = celery_config.broker_problem(url)
    assert problem is not None
    assert "broker_url" in problem


@pytest.mark.parametrize(
    "url",
    [
        "redis://:s3cret@127.0.0.1:6379/0",
        "rediss://det-workers:s3cret@broker.internal:6380/0",
        "amqp://det:s3cret@rabbit.internal//",
    ],
)
def test_a_broker_with_credentials_passes(url: str) -> None:
    assert celery_config.broker_problem(url) is None
