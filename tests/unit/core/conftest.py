"""Fixtures for the Core API: a clean trial environment, and a recording stand-in for the master's
``/runtime`` routes (an httpx MockTransport: it checks what the client sends, not the master)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from det_airflow import trial_env
from det_airflow.api._http import API_PREFIX, Session
from det_airflow.api.runtime import RuntimeClient
from det_airflow.core import Context, DistributedContext

TOKEN = "trial-token"
MASTER = "http://master.test:8080"
TRIAL_VARIABLES = [v for k, v in vars(trial_env).items() if k.isupper() and isinstance(v, str)]


class Opaque:
    """A value no report can carry; the refusals name its type ("a Opaque")."""


class NonChief(DistributedContext):
    """Rank 1 of a trial, without a process group: its ``broadcast`` answers what the chief sent."""

    def __init__(self, chief_sends: Any = None) -> None:
        super().__init__()
        self.chief_sends = chief_sends

    @property
    def is_chief(self) -> bool:
        return False

    def broadcast(self, stuff: Any = None) -> Any:
        return self.chief_sends


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No DET_* variable leaks in from the outside, and the current folder is a fresh one."""
    for name in TRIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield


@dataclass
class Request:
    method: str
    path: str  # without the API prefix
    body: Any
    authorization: str | None


@dataclass
class FakeRuntime:
    """Answers the /runtime routes with canned values and records every request."""

    trial_id: int = 7
    preempt: bool = False
    length: int = 100
    op_completed: bool = False
    complete_on_report: bool = True  # False: a master that keeps answering the same operation
    best: float | None = None
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix(API_PREFIX)
        body = json.loads(request.content) if request.content else None
        self.requests.append(Request(request.method, path, body, request.headers.get("authorization")))
        trial = f"/runtime/trials/{self.trial_id}"
        route = (request.method, path)
        if route == ("GET", f"{trial}/preemption"):
            return httpx.Response(200, json={"preempt": self.preempt})
        if route == ("GET", f"{trial}/searcher/operation"):
            return httpx.Response(200, json={"length": self.length, "completed": self.op_completed})
        if route == ("POST", f"{trial}/searcher/completed"):
            self.op_completed = self.complete_on_report
            return httpx.Response(200, json={})
        if route == ("GET", f"{trial}/best_validation"):
            return httpx.Response(200, json={"metric": self.best})
        if route == ("POST", f"{trial}/checkpoints"):
            self.checkpoints[body["uuid"]] = {**body, "state": "COMPLETED"}
            return httpx.Response(200, json={"checkpoint": self.checkpoints[body["uuid"]]})
        if request.method == "GET" and path.startswith("/runtime/checkpoints/"):
            uuid = path.rsplit("/", 1)[1]
            if uuid not in self.checkpoints:
                return httpx.Response(404, json={"detail": f"checkpoint {uuid} not found"})
            return httpx.Response(200, json={"checkpoint": self.checkpoints[uuid]})
        if request.method == "DELETE" and path.startswith("/runtime/checkpoints/"):
            self.checkpoints.pop(path.rsplit("/", 1)[1], None)
            return httpx.Response(200, json={})
        if request.method == "POST" and path in (
            f"{trial}/metrics",
            f"{trial}/progress",
            f"{trial}/early_exit",
        ):
            return httpx.Response(200, json={})
        return httpx.Response(404, json={"detail": f"no route {request.method} {path}"})

    def client(self) -> RuntimeClient:
        session = Session(MASTER, TOKEN)
        session._client.close()
        session._client = httpx.Client(
            base_url=session.master + API_PREFIX,
            headers={"Authorization": f"Bearer {TOKEN}"},
            transport=httpx.MockTransport(self.handler),
        )
        return RuntimeClient(None, None, self.trial_id, session=session)

    def sent(self, method: str, suffix: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]


@pytest.fixture
def fake_runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
def on_trial(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., dict[str, str]]:
    """Sets the DET_* variables of trial 7 of experiment 3 (shared_fs checkpoints under tmp_path);
    ``master=None`` makes it a local trial (as ``det e create --local`` runs it)."""

    def setup(*, master: str | None = MASTER, **config: Any) -> dict[str, str]:
        cfg = {
            "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 100}},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(tmp_path / "shared"),
                "storage_path": "ckpts",
            },
            "data": {"url": "s3://bucket/data"},
            **config,
        }
        env = {
            trial_env.TRIAL_ID: "7",
            trial_env.EXPERIMENT_ID: "3",
            trial_env.TRIAL_SEED: "42",
            trial_env.HPARAMS: json.dumps({"lr": 0.1}),
            trial_env.EXPERIMENT_CONFIG: json.dumps(cfg),
            trial_env.STEPS_COMPLETED: "0",
        }
        if master:
            env[trial_env.MASTER] = master
            env[trial_env.SESSION_TOKEN] = TOKEN
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return env

    return setup


@pytest.fixture
def remote_init(
    on_trial: Callable[..., dict[str, str]], fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Context]:
    """``core.init()`` on trial 7 with a master: its requests go to ``fake_runtime``."""
    from det_airflow.core import _context
    from det_airflow.core._remote import RemoteBackend

    def init(**config: Any) -> Context:
        on_trial(**config)
        monkeypatch.setattr(_context, "_remote_backend", lambda info: RemoteBackend(fake_runtime.client()))
        return _context.init()

    return init


@pytest.fixture
def python_env() -> dict[str, str]:
    """The environment for a child Python: this checkout of det_airflow first on its path."""
    import os

    import det_airflow

    root = str(Path(det_airflow.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
