"""Celery settings of det-airflow's Airflow, and each Celery worker's host heartbeat.

``[celery] celery_config_options = det_airflow.celery_config.DET_CELERY_CONFIG`` gives Airflow's
Celery app the provider's own defaults, unchanged; importing this module also connects Celery's
worker signals, so that every Celery worker is a det-airflow *host*: once it is ready, its main
process sends the master its inventory (:func:`det_airflow.hosts.inventory`) every
:data:`HEARTBEAT_SECONDS`, and says goodbye when it shuts down. When the heartbeat's answer says
file removals wait for the host (checkpoints, its trial work folders: master/removals.py), a thread
of its own claims and carries them out, so that a long removal never delays a heartbeat. The
scheduler and the API server import this module too; the signals never fire there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from celery.signals import worker_ready, worker_shutdown

from det_airflow.api.internal import InternalClient
from det_airflow.api.models import HostReport, Removal
from det_airflow.hosts import inventory
from det_airflow.operators.hooks import DetHook

log = logging.getLogger(__name__)

#: What Airflow's Celery app is configured with: the provider's defaults (built from airflow.cfg).
DET_CELERY_CONFIG: dict[str, Any] = dict(DEFAULT_CELERY_CONFIG)

#: Seconds between two heartbeats of a host; the master drops a host after ``[det] host_timeout``.
HEARTBEAT_SECONDS = 5.0


class HostClient(Protocol):
    """What the heartbeat needs of the master's client (:class:`InternalClient`)."""

    def report_host(self, host_id: str, report: HostReport) -> object: ...

    def claim_removals(self, host_id: str) -> list[Removal]: ...

    def finish_removal(self, host_id: str, removal_id: int, not_removed: list[str]) -> None: ...

    def leave_host(self, host_id: str) -> None: ...

    def close(self) -> None: ...


class _WorkerDetHook(DetHook):
    """DetHook for a Celery worker's main process, which runs no task: there the Task SDK's lookup
    reads only ``AIRFLOW_CONN_*`` variables and external secrets backends, while Airflow core's
    reads those and then the metadata database, where ``det admin migrate`` stores ``det_default``."""

    @classmethod
    def get_connection(cls, conn_id: str) -> Any:
        from det_airflow import airflow_compat

        return airflow_compat.Connection.get_connection_from_secrets(conn_id)


def master_client() -> InternalClient:
    """A client of the master from the ``det_default`` connection, quick to give up: a heartbeat
    that fails is sent again at the next beat, not retried for minutes."""
    client = InternalClient(*_WorkerDetHook().credentials, timeout=HEARTBEAT_SECONDS)
    client.session.retry_seconds = HEARTBEAT_SECONDS
    return client


class HostHeartbeat:
    """The heartbeat of this worker's host: :meth:`beat` reports the inventory once; :meth:`run`
    beats until stopped, then :meth:`leave` tells the master the host is gone.

    Failures (no connection yet, the master away, a bad ``[det]`` setting) are logged, once per
    distinct message, and tried again at the next beat: they never stop the worker.
    """

    def __init__(
        self,
        client_factory: Callable[[], HostClient] = master_client,
        read_inventory: Callable[[], tuple[str, HostReport]] = inventory,
        interval: float = HEARTBEAT_SECONDS,
        removals: HostRemovals | None = None,
    ) -> None:
        self._client_factory = client_factory
        self.removals = removals
        self._read_inventory = read_inventory
        self.interval = interval
        self._client: HostClient | None = None
        self.host_id: str | None = None
        self.reported = False
        self.last_error: str | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> bool:
        """Send one heartbeat; True when the master took it."""
        try:
            self.host_id, report = self._read_inventory()
            if self._client is None:
                self._client = self._client_factory()
            answer = self._client.report_host(self.host_id, report)
            self.reported = True
        except Exception as e:  # a heartbeat must never take the worker down
            self._failed(f"{e.__class__.__name__}: {e}")
            return False
        if self.last_error is not None:
            log.info("det-airflow host %s: heartbeat reaches the master again", self.host_id)
            self.last_error = None
        if self.removals is not None and getattr(answer, "removals_waiting", None):
            self.removals.wake(self.host_id)
        return True

    def _failed(self, message: str) -> None:
        if message != self.last_error:
            log.warning(
                "det-airflow host %s: heartbeat not sent (%s); trying again every %.0f s",
                self.host_id or "(unknown)",
                message,
                self.interval,
            )
        self.last_error = message
        self._drop_client()  # the connection may change: read it again at the next beat

    def _drop_client(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                log.debug("closing the master's client failed", exc_info=True)
            self._client = None

    def run(self) -> None:
        """Beat every ``interval`` seconds until :meth:`stop`."""
        while not self._stopping.is_set():
            self.beat()
            self._stopping.wait(self.interval)

    def start(self) -> None:
        """Beat in a daemon thread (and remove files in another)."""
        if self.removals is not None:
            self.removals.start()
        self._thread = threading.Thread(target=self.run, name="det-host-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (waiting for a beat in flight) and tell the master the host leaves."""
        self._stopping.set()
        if self.removals is not None:
            self.removals.stop()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval)
        self.leave()

    def leave(self) -> None:
        """Tell the master this host offers no slots any more (only if the master ever heard of it)."""
        if not self.reported or self.host_id is None:
            return
        try:
            if self._client is None:
                self._client = self._client_factory()
            self._client.leave_host(self.host_id)
        except Exception as e:
            log.warning("det-airflow host %s: could not tell the master it leaves (%s)", self.host_id, e)
        finally:
            self._drop_client()


class HostRemovals:
    """Carries out the file removals the master queued for this host, in a thread of its own:
    woken by the heartbeat, it claims removals until none is left, carries each one out
    (``file_cleanup.carry_out``: the host's own roots, the owner's identity) and reports it."""

    def __init__(
        self,
        client_factory: Callable[[], HostClient] = master_client,
        carry_out: Callable[[Removal], list[str]] | None = None,
    ) -> None:
        self._client_factory = client_factory
        self._carry_out = carry_out or _carry_out
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._host_id: str | None = None
        self._thread: threading.Thread | None = None
        self.done = 0

    def wake(self, host_id: str) -> None:
        self._host_id = host_id
        self._due.set()

    def work_off(self, host_id: str) -> int:
        """Claim and carry out removals until none waits; answers how many were carried out."""
        client = self._client_factory()
        count = 0
        try:
            while not self._stopping.is_set() and (batch := client.claim_removals(host_id)):
                for removal in batch:
                    client.finish_removal(host_id, removal.id, self._carry_out(removal))
                    count += 1
        finally:
            client.close()
        self.done += count
        return count

    def run(self) -> None:
        while not self._stopping.is_set():
            self._due.wait()
            self._due.clear()
            if self._stopping.is_set() or self._host_id is None:
                continue
            try:
                self.work_off(self._host_id)
            except Exception as e:  # tried again when the next heartbeat says removals wait
                log.warning("det-airflow host %s: file removals not done (%s)", self._host_id, e)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="det-host-removals", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._due.set()


def _carry_out(removal: Removal) -> list[str]:
    from det_airflow.master import file_cleanup

    return file_cleanup.carry_out(removal)


def broker_problem(url: str) -> str | None:
    """Why a worker's broker URL lets any process that reaches the broker in, or None.

    Trials run on the workers' machines. A broker that asks no password lets one of them take
    queued tasks' messages, read their tokens and put back messages naming a DAG file of its own,
    which the worker (root, to start trials as their owners) then parses (README "Scale out")."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme.startswith(("redis", "rediss", "sentinel")) and not parts.password:
        return (
            f"the Celery broker ({scheme}://{parts.hostname}:{parts.port or ''}) asks no password: "
            "any process that reaches it, a trial among them, can read and forge task messages; "
            "give Redis a password (requirepass, or an ACL user) and put it in [celery] broker_url"
        )
    if scheme.startswith(("amqp", "pyamqp")) and (not parts.password or parts.username == "guest"):
        return (
            f"the Celery broker ({scheme}://{parts.hostname}) logs in as {parts.username or 'guest'}: "
            "give the workers a user of their own with a password in [celery] broker_url"
        )
    return None


_heartbeat: HostHeartbeat | None = None


@worker_ready.connect
def _start_heartbeat(**_: object) -> None:
    global _heartbeat
    if (problem := broker_problem(str(DET_CELERY_CONFIG.get("broker_url") or ""))) is not None:
        log.warning("det-airflow: %s (docs: README, Scale out)", problem)
    if _heartbeat is None:
        _heartbeat = HostHeartbeat(removals=HostRemovals())
        _heartbeat.start()


@worker_shutdown.connect
def _stop_heartbeat(**_: object) -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None


__all__ = [
    "DET_CELERY_CONFIG",
    "HEARTBEAT_SECONDS",
    "HostHeartbeat",
    "HostRemovals",
    "broker_problem",
    "master_client",
]
