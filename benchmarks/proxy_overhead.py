"""Proxy overhead: what the master's ``/det/proxy/<id>/`` adds to a task's server's answers, on loopback.

A stand-in task server (uvicorn serving a small Starlette app under the task's prefix) and the master
(uvicorn serving the master's app on SQLite under Airflow's simple auth manager, with one running
notebook of alice's whose server is that stand-in) each run in a process of their own. Requests to
the master carry alice's Airflow login, a JWT as Airflow's login issues it, so each one pays the real
login check. This process times, straight to the task's server and through the proxy:

- a 10 MB download, ``--big-repeat`` times;
- ``--small`` GETs of a 100-byte answer, one after another on one kept-alive connection, ``--runs``
  times;
- ``--messages`` WebSocket round trips of a 100-byte message on one connection, ``--runs`` times;
- for reference, ``--small`` GETs of ``/det/proxy/<id>`` (the redirect to the task's prefix): the
  master's login check and routing alone, the floor of any request to the master.

Printed: medians, what the proxy adds per request, and the ratios proxied/direct.

    .venv/bin/python benchmarks/proxy_overhead.py [--small 1000] [--big-repeat 10] [--messages 1000]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

SECRET = "bench-secret-0123456789abcdef"
BIG_BYTES = 10 * 1024**2
SMALL = b"x" * 100
TASK_ID = 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(port: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {seconds:.0f} s")


def serve_task_server(port: int) -> None:
    """The stand-in task server: ``big`` (10 MB), anything else 100 bytes, ``ws`` an echo; every
    request needs the secret, as a real task's server does."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    from det_airflow.tasks._server import SECRET_HEADER

    big = os.urandom(BIG_BYTES)

    async def answer(request: Request) -> Response:
        if request.headers.get(SECRET_HEADER) != SECRET:
            return Response(status_code=403)
        return Response(big if request.path_params["rest"] == "big" else SMALL)

    async def echo(websocket: WebSocket) -> None:
        if websocket.headers.get(SECRET_HEADER) != SECRET:
            await websocket.close(4403)
            return
        await websocket.accept()
        try:
            while True:
                await websocket.send_bytes(await websocket.receive_bytes())
        except WebSocketDisconnect:
            pass

    app = Starlette(
        routes=[
            WebSocketRoute("/det/proxy/{task_id:int}/ws", echo),
            Route("/det/proxy/{task_id:int}/{rest:path}", answer),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def serve_master(port: int, task_port: int, folder: Path) -> None:
    """The master's app with one running notebook of alice's, served at ``task_port``; alice's
    Airflow login (a JWT, as Airflow's login page issues it) written to ``folder/token``."""
    import uvicorn
    from airflow import settings
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.revoked_token import RevokedToken

    from det_airflow.airflow_compat import get_auth_manager
    from det_airflow.master import schema
    from det_airflow.master.app import create_app
    from det_airflow.master.db import get_database
    from det_airflow.master.lifecycle import now
    from tests.unit.master.people_app import People

    db = get_database()
    db.migrate()
    people = People(client=None, db=db, storage=folder)  # type: ignore[arg-type]
    experiment_id = people.add_experiment(owner="alice")
    people.add_trial(experiment_id, state="RUNNING")
    with db.begin() as conn:
        conn.execute(
            schema.tasks.insert().values(
                id=experiment_id,
                type="notebook",
                config={},
                args={},
                address="127.0.0.1",
                port=task_port,
                secret=SECRET,
                ready_at=now(),
            )
        )
    # Every login check asks whether its token was revoked at a logout.
    RevokedToken.__table__.create(settings.engine, checkfirst=True)
    create_auth_manager()
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="alice", role="user"))
    (folder / "token").write_text(token)
    uvicorn.run(create_app(background_jobs=False), host="127.0.0.1", port=port, log_level="warning")


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # warm-up: connections open, caches filled
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def download(client: httpx.Client, url: str, headers: dict[str, str]) -> Callable[[], None]:
    def get() -> None:
        digest = hashlib.sha256()
        size = 0
        with client.stream("GET", url, headers=headers) as answer:
            answer.raise_for_status()
            for chunk in answer.iter_raw():
                digest.update(chunk)
                size += len(chunk)
        assert size == BIG_BYTES, size

    return get


def small_gets(
    client: httpx.Client, url: str, headers: dict[str, str], count: int, expected: int = 200
) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            answer = client.get(url, headers=headers, follow_redirects=False)
            assert answer.status_code == expected, answer.text
            assert expected != 200 or answer.content == SMALL, answer.content[:100]

    return run


def round_trips(url: str, headers: dict[str, str], count: int) -> Callable[[], None]:
    from websockets.sync.client import connect

    def run() -> None:
        with connect(url, additional_headers=headers, compression=None, proxy=None) as ws:
            for _ in range(count):
                ws.send(SMALL)
                assert ws.recv() == SMALL

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1000, help="small GETs per run (default 1000)")
    parser.add_argument("--big-repeat", type=int, default=10, help="10 MB downloads per arm (default 10)")
    parser.add_argument("--messages", type=int, default=1000, help="WebSocket round trips per run")
    parser.add_argument("--runs", type=int, default=3, help="runs of the small GETs and round trips")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="det-proxy-bench-"))
    task_port, master_port = _free_port(), _free_port()
    os.environ.update(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{folder / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(folder / "dags"),
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.unit.master.people_app.PerDagAuthManager",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{master_port}",
            "AIRFLOW__DET__TRIAL_WORK_DIR": str(folder / "det-trials"),
            "AIRFLOW__API_AUTH__JWT_SECRET": "b" * 64,
        }
    )
    spawn = multiprocessing.get_context("spawn")
    servers = [
        spawn.Process(target=serve_task_server, args=(task_port,), daemon=True),
        spawn.Process(target=serve_master, args=(master_port, task_port, folder), daemon=True),
    ]
    for server in servers:
        server.start()
    try:
        _wait_for(task_port)
        _wait_for(master_port)
        direct = f"http://127.0.0.1:{task_port}/det/proxy/{TASK_ID}"
        proxied = f"http://127.0.0.1:{master_port}/proxy/{TASK_ID}"
        secret = {"X-Det-Task-Secret": SECRET}
        login = {"Authorization": f"Bearer {(folder / 'token').read_text()}"}
        arms = {"direct": (direct, secret), "proxied": (proxied, login)}
        results: dict[str, dict[str, list[float]]] = {arm: {} for arm in arms}
        with httpx.Client(trust_env=False, timeout=60) as client:
            for arm, (base, headers) in arms.items():
                results[arm]["big"] = timed(download(client, f"{base}/big", headers), args.big_repeat)
                results[arm]["small"] = timed(
                    small_gets(client, f"{base}/small", headers, args.small), args.runs
                )
                ws_url = base.replace("http://", "ws://") + "/ws"
                results[arm]["ws"] = timed(round_trips(ws_url, headers, args.messages), args.runs)
            floor = timed(small_gets(client, proxied, login, args.small, expected=307), args.runs)
    finally:
        for server in servers:
            server.terminate()
            server.join(timeout=10)

    print(f"loopback, {os.cpu_count()} CPUs; master and task server one uvicorn process each")
    print(f"{'measure':<34} {'direct':>12} {'proxied':>12} {'added':>12} {'ratio':>7}")

    def row(label: str, key: str, scale: float, unit: str) -> None:
        d = statistics.median(results["direct"][key]) * scale
        p = statistics.median(results["proxied"][key]) * scale
        print(f"{label:<34} {d:>9.2f} {unit:<2} {p:>9.2f} {unit:<2} {p - d:>9.2f} {unit:<2} {p / d:>6.2f}x")

    row("10 MB download (median)", "big", 1000, "ms")
    mb_s = {arm: BIG_BYTES / 1024**2 / statistics.median(results[arm]["big"]) for arm in arms}
    print(f"{'  throughput':<34} {mb_s['direct']:>6.0f} MB/s {mb_s['proxied']:>6.0f} MB/s")
    row(f"{args.small} small GETs, per request", "small", 1000 / args.small, "ms")
    row(f"{args.messages} WebSocket round trips, each", "ws", 1000 / args.messages, "ms")
    login_floor = statistics.median(floor) * 1000 / args.small
    print(
        f"{'login check + routing alone':<34} {'':>12} {login_floor:>9.2f} ms  (GET /det/proxy/<id>, a redirect)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
