"""A master for unmanaged runs, served over a real loopback socket on SQLite, with Airflow's simple
auth manager deciding; only Airflow's login is replaced: the bearer token names the user."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from airflow.api_fastapi.app import create_auth_manager, purge_cached_app
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import FastAPI, HTTPException, Request

from det_airflow import trial_env
from det_airflow.api.user import CONFIG_DIR_ENV
from det_airflow.master.app import create_app
from det_airflow.master.db import Database, get_database

ROLES = {"alice": "user", "viewer": "viewer"}


async def _user_from_token(request: Request) -> SimpleAuthManagerUser:
    name = request.headers.get("authorization", "").removeprefix("Bearer ").removesuffix("-token")
    if name not in ROLES:
        raise HTTPException(401, "Not authenticated")
    return SimpleAuthManagerUser(username=name, role=ROLES[name])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def master(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Database]]:
    """(the master's URL, its database); ``DET_MASTER`` points at it."""
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER",
        "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
    )
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(tmp_path / "checkpoints"))
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "det-config"))
    monkeypatch.delenv(trial_env.TRIAL_ID, raising=False)
    get_database.cache_clear()
    db = get_database()
    db.migrate()
    create_auth_manager()
    app = create_app()
    app.dependency_overrides[get_user] = _user_from_token
    root = FastAPI()
    root.mount("/det", app)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(root, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the master's test server did not start within 30 s"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv(trial_env.MASTER, url)
    try:
        yield url, db
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        db.engine.dispose()
        get_database.cache_clear()
        purge_cached_app()
