"""The ports `localairflow init` gives the Celery mode's Redis and PostgreSQL: free, and outside the
kernel's ephemeral range, where an outgoing connection (even a client reconnecting to the port
while its service is down) could take the port before the service starts."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from det_airflow import localairflow
from det_airflow.localairflow import ephemeral_ports, init_celery, service_port

PG_URL = "postgresql://airflow:pw@127.0.0.1:5432/airflow"


def range_file(tmp_path: Path, low: int, high: int) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    return path


def binds(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def held_port() -> Iterator[tuple[int, int]]:
    """Two neighbouring ports, the first one held by a listener of this test; skips when the
    machine already uses either."""
    for port in range(20000, 20100, 2):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        if not binds(port + 1):
            s.close()
            continue
        s.listen()
        with s:
            yield port, port + 1
        return
    pytest.skip("no two free neighbouring ports in 20000-20100")


def test_the_ephemeral_range_is_read_from_the_kernels_file(tmp_path: Path) -> None:
    assert ephemeral_ports(range_file(tmp_path, 40000, 50000)) == range(40000, 50001)


@pytest.mark.parametrize("content", [None, "", "garbage", "1 2 3"])
def test_an_unreadable_range_falls_back_to_linuxs_default(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "ip_local_port_range"
    if content is not None:
        path.write_text(content)
    assert ephemeral_ports(path) == range(32768, 61000)


def test_a_service_port_is_free_and_outside_the_ephemeral_range(tmp_path: Path) -> None:
    path = range_file(tmp_path, 30000, 60999)
    for _ in range(20):
        port = service_port(range_file=path)
        assert port not in range(30000, 61000)
        assert 20000 <= port <= 65535
        assert binds(port)


def test_a_service_port_lies_below_the_ephemeral_range_when_nothing_is_left_above(tmp_path: Path) -> None:
    path = range_file(tmp_path, 21000, 65535)
    ports = {service_port(range_file=path) for _ in range(20)}
    assert all(20000 <= p < 21000 for p in ports), ports
    assert len(ports) > 1  # a random start: two homes set up at once rarely share a port


def test_a_held_or_excluded_port_is_never_chosen(tmp_path: Path, held_port: tuple[int, int]) -> None:
    held, free = held_port
    path = range_file(tmp_path, free + 1, 65535)
    floor_to_held = [p for p in range(20000, held) if binds(p)]
    exclude = set(floor_to_held)
    for _ in range(10):
        assert service_port(exclude, range_file=path) == free


def test_init_gives_redis_and_postgres_free_ports_outside_the_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(localairflow, "EPHEMERAL_RANGE_FILE", range_file(tmp_path, 20500, 65535))
    monkeypatch.setattr(localairflow, "redis_server", lambda: Path("/usr/bin/redis-server"))
    monkeypatch.setattr(localairflow, "postgres_bindir", lambda: Path("/usr/lib/postgresql/bin"))
    monkeypatch.setattr(
        localairflow, "home_postgres", lambda home, port, password: SimpleNamespace(url=f"pg:{port}")
    )
    monkeypatch.setattr(localairflow, "prepare_postgres", lambda cluster: None)
    layout, url, _ = init_celery(tmp_path / "home", workers=1, host_slots=1, sql_alchemy_conn=None)
    assert layout.postgres_port is not None
    assert url == f"pg:{layout.postgres_port}"
    assert {layout.redis_port, layout.postgres_port} <= set(range(20000, 20500))
    assert layout.redis_port != layout.postgres_port
    assert binds(layout.redis_port) and binds(layout.postgres_port)
