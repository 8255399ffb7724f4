"""The Celery mode's broker keeps its queues across a restart: the messages of queued tasks are
still there after Redis stops cleanly or its process is killed. Runs Debian's redis-server on the
command line localairflow gives it; nothing else starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow.localairflow import (
    REDIS_SERVER,
    CeleryLayout,
    LocalAirflow,
    celery_workers,
    service_port,
    write_config,
)

pytestmark = pytest.mark.skipif(not os.access(REDIS_SERVER, os.X_OK), reason=f"needs {REDIS_SERVER}")


class Broker:
    """Redis run on the home's command line, as ``LocalAirflow.start()`` runs it."""

    def __init__(self, af: LocalAirflow) -> None:
        assert af.celery is not None
        self.af = af
        self.port = af.celery.redis_port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        (self.af.home / "redis").mkdir(mode=0o700, exist_ok=True)
        with self.af.log_file("redis").open("ab") as log:
            self.proc = subprocess.Popen(
                self.af.components()["redis"], cwd=self.af.home, stdout=log, stderr=subprocess.STDOUT
            )

    def stop(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=20)
        self.proc = None

    def command(self, *words: str, login: bool = True) -> bytes:
        """One command (Redis's inline protocol) and its reply, after logging in with the home's
        password unless ``login`` is False; retried while Redis starts or loads."""
        assert self.af.celery is not None and self.af.celery.redis_password
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    if login:
                        s.sendall(f"AUTH {self.af.celery.redis_password}\r\n".encode())
                        assert s.recv(64) == b"+OK\r\n"
                    s.sendall(" ".join(words).encode() + b"\r\n")
                    reply = s.recv(4096)
            except OSError:
                reply = b""
            if reply and not reply.startswith(b"-LOADING"):
                return reply
            assert time.monotonic() < deadline, f"Redis does not answer {words}: {reply!r}\n{self.log()}"
            time.sleep(0.1)

    def log(self) -> str:
        return self.af.log_file("redis").read_text(errors="replace")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    home = write_config(
        tmp_path / "home",
        sql_alchemy_conn="postgresql://airflow:pw@127.0.0.1:5432/airflow",
        dags_folder=tmp_path / "dags",
        celery=CeleryLayout(redis_port=service_port(), workers=celery_workers(1)),
    ).home
    b = Broker(LocalAirflow.load(home))
    yield b
    if b.proc is not None:
        b.proc.kill()
        b.proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_queued_messages_outlive_a_restart_of_the_broker(broker: Broker, sig: signal.Signals) -> None:
    broker.start()
    assert broker.command("RPUSH", "default", "task-1", "task-2") == b":2\r\n"
    broker.stop(sig)
    broker.start()
    assert broker.command("LRANGE", "default", "0", "-1") == b"*2\r\n$6\r\ntask-1\r\n$6\r\ntask-2\r\n"
    assert list((broker.af.home / "redis").iterdir()), "Redis keeps its data in the home"


def test_the_broker_refuses_whoever_lacks_the_homes_password(broker: Broker) -> None:
    """A process of this machine that reaches Redis, a trial among them, can neither take queued
    tasks' messages nor put forged ones back without the password only airflow.cfg's reader has."""
    broker.start()
    assert broker.command("RPUSH", "default", "task-1") == b":1\r\n"
    for words in (("BRPOP", "default", "1"), ("LRANGE", "default", "0", "-1"), ("RPUSH", "default", "x")):
        assert broker.command(*words, login=False).startswith(b"-NOAUTH"), words
    assert broker.command("LRANGE", "default", "0", "-1") == b"*1\r\n$6\r\ntask-1\r\n"
