"""The people app served for real by uvicorn on loopback, under ``/det`` as Airflow's API server
mounts it: for clients that need a socket (a trial's Core API, a trial process), with bodies
streamed both ways."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn
from sqlalchemy import update
from starlette.applications import Starlette
from starlette.routing import Mount

from det_airflow.master import schema
from det_airflow.master.auth import hash_token
from tests.unit.master.people_app import People


@contextlib.contextmanager
def served(people: People) -> Iterator[str]:
    """The master's URL while it serves."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    site = Starlette(routes=[Mount("/det", app=people.client.app)])
    server = uvicorn.Server(
        uvicorn.Config(site, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the master did not start serving")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def give_token(people: People, trial_id: int, token: str) -> None:
    """Trial ``trial_id``'s current run holds ``token``."""
    with people.db.begin() as conn:
        conn.execute(
            update(schema.trials).where(schema.trials.c.id == trial_id).values(token_hash=hash_token(token))
        )
