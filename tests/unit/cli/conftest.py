"""A tiny stand-in master (the People routes of docs/master-api.md with canned data), served for real
by uvicorn on 127.0.0.1, and helpers to drive ``det`` in-process or as the installed console script."""

from __future__ import annotations

import http.server
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
import uvicorn
import yaml
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from det_airflow.cli import experiment as experiment_cli
from det_airflow.cli import logs as logs_cli
from det_airflow.cli.main import main
from det_airflow.states import LOG_LEVELS

TOKEN = "good-token"
# A second, non-admin user, and a token signed with a JWT secret the master no longer has.
CAROL_TOKEN = "carol-token"
STALE_TOKEN = "stale-token"
USERS = {"admin": "s3cret", "carol": "carol-pw"}
TOKENS = {TOKEN: "admin", CAROL_TOKEN: "carol"}
ADMINS = {"admin"}
FINISHED = {"COMPLETED", "CANCELED", "ERROR"}
# action -> (states it may start from, state it leads to), as the real master has them.
TRANSITIONS = {
    "pause": ({"ACTIVE"}, "PAUSED"),
    "activate": ({"PAUSED"}, "ACTIVE"),
    "cancel": ({"ACTIVE", "PAUSED"}, "STOPPING_CANCELED"),
    "kill": ({"ACTIVE", "PAUSED", "STOPPING_CANCELED"}, "STOPPING_KILLED"),
}
CHECKPOINT_UUID = "5f1c2a9e-0b7d-4c3e-9a1f-2b3c4d5e6f70"
DET_SCRIPT = Path(sys.executable).with_name("det")


def _experiment(experiment_id: int, **fields: Any) -> dict[str, Any]:
    base = {
        "id": experiment_id,
        "name": f"exp-{experiment_id}",
        "owner": "admin",
        "description": None,
        "labels": [],
        "state": "ACTIVE",
        "progress": 0.0,
        "start_time": "2025-03-01T12:00:00+00:00",
        "end_time": None,
        "parent_id": None,
        "resource_pool": "default",
        "searcher": "single",
        "searcher_metric": "loss",
        "best_validation": None,
        "archived": False,
        "dag_id": f"det_experiment_{experiment_id}",
        "dag_run_id": None,
        "error": None,
        "num_trials": 0,
    }
    return base | fields


def _trial(trial_id: int, experiment_id: int, **fields: Any) -> dict[str, Any]:
    base = {
        "id": trial_id,
        "experiment_id": experiment_id,
        "request_id": trial_id,
        "slot": 0,
        "state": "RUNNING",
        "hparams": {"lr": 0.1},
        "trial_seed": 7,
        "start_time": "2025-03-01T12:00:05+00:00",
        "end_time": None,
        "total_batches": 0,
        "restarts": 0,
        "progress": 0.0,
        "latest_checkpoint": None,
        "best_validation": None,
        "summary_metrics": {"training": {}, "validation": {}},
        "early_exit": None,
        "stop_requested": False,
        "preempt_requested_at": None,
        "airflow_task": None,
    }
    return base | fields


def _log(
    log_id: int, trial_id: int, message: str, *, rank: int | None = 0, level: str = "INFO"
) -> dict[str, Any]:
    return {
        "id": log_id,
        "trial_id": trial_id,
        "timestamp": f"2025-03-01T12:00:{log_id:02d}+00:00",
        "container_id": "c0ffee",
        "rank": rank,
        "level": level,
        "stdtype": "stdout",
        "message": message + "\n",
    }


@dataclass
class FakeMaster:
    """What the stand-in master holds; tests read and change it directly."""

    url: str = ""
    experiments: dict[int, dict[str, Any]] = field(default_factory=dict)
    trials: dict[int, dict[str, Any]] = field(default_factory=dict)
    logs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    metrics: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    configs: dict[int, dict[str, Any]] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)
    # Every create body received, resends included.
    create_requests: list[dict[str, Any]] = field(default_factory=list)
    by_request_id: dict[str, int] = field(default_factory=dict)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    actions: list[tuple[str, Any]] = field(default_factory=list)
    seen_auth: list[str | None] = field(default_factory=list)
    # A created experiment then "runs": its trial appears, logs a few lines and ends in this state.
    final_state: str = "COMPLETED"
    # What the master's delete answers it could not remove.
    not_removed: list[str] = field(default_factory=list)
    removing: list[str] = field(default_factory=list)
    ticks: dict[int, int] = field(default_factory=dict)
    # The time window of every logs request, as the route parsed it.
    log_queries: list[dict[str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        url = self.url
        self.__init__()  # type: ignore[misc]
        self.url = url
        self.experiments = {
            1: _experiment(
                1, state="COMPLETED", progress=1.0, end_time="2025-03-01T13:30:00+00:00", num_trials=2
            ),
            2: _experiment(2, name="search", owner="bob", state="ACTIVE", progress=0.25, parent_id=1),
            3: _experiment(3, state="CANCELED", archived=True),
        }
        self.trials = {
            10: _trial(
                10,
                1,
                state="COMPLETED",
                hparams={"lr": 0.1, "opt": {"name": "sgd"}},
                total_batches=937,
                end_time="2025-03-01T13:00:00+00:00",
                summary_metrics={
                    "training": {"steps_completed": 937, "loss": 0.25},
                    "validation": {"accuracy": {"last": 0.9, "min": 0.5}},
                },
            ),
            11: _trial(11, 1, state="ERROR", total_batches=100),
        }
        self.logs = {
            10: [
                _log(1, 10, "starting", rank=None),
                _log(2, 10, "epoch 1", rank=0),
                _log(3, 10, "epoch 1", rank=1),
                _log(4, 10, "warning here", rank=0, level="WARNING"),
                _log(5, 10, "done", rank=0),
            ],
            11: [],
        }
        self.metrics = {
            10: [
                {
                    "trial_id": 10,
                    "group": "training",
                    "steps_completed": 100,
                    "metrics": {"loss": 0.3},
                    "report_time": "2025-03-01T12:10:00+00:00",
                },
                {
                    "trial_id": 10,
                    "group": "validation",
                    "steps_completed": 100,
                    "metrics": {"accuracy": 0.9},
                    "report_time": "2025-03-01T12:11:00+00:00",
                },
            ]
        }
        self.configs = {
            1: {"name": "exp-1", "searcher": {"name": "single", "metric": "loss"}, "max_restarts": 5}
        }
        self.checkpoints = {
            CHECKPOINT_UUID: {
                "uuid": CHECKPOINT_UUID,
                "trial_id": 10,
                "experiment_id": 1,
                "steps_completed": 937,
                "state": "COMPLETED",
                "metadata": {"steps_completed": 937, "framework": "torch"},
                "resources": {"model.pt": 2048, "state/optimizer.pt": 1024},
                "size": 3072,
                "storage": {"type": "shared_fs", "path": f"/nonexistent/checkpoints/{CHECKPOINT_UUID}"},
                "report_time": "2025-03-01T12:59:00+00:00",
                "validation_metric": 0.9,
            }
        }

    # --- the life of an experiment created by a test ---

    def advance(self, experiment_id: int) -> None:
        if experiment_id not in self.ticks:
            return
        tick = self.ticks[experiment_id] = self.ticks[experiment_id] + 1
        trial_id = 100 + experiment_id
        if tick == 2:
            self.trials[trial_id] = _trial(trial_id, experiment_id)
            self.logs[trial_id] = [_log(1, trial_id, "hello from the first trial")]
        elif tick == 4:
            self.logs[trial_id].append(_log(2, trial_id, "training..."))
        elif tick == 6:
            self.logs[trial_id].append(_log(3, trial_id, "bye"))
            self.trials[trial_id]["state"] = "COMPLETED" if self.final_state == "COMPLETED" else "ERROR"
        elif tick == 8:
            self.experiments[experiment_id]["state"] = self.final_state
            if self.final_state == "ERROR":
                self.experiments[experiment_id]["error"] = "every trial failed"


def build_app(master: FakeMaster) -> FastAPI:
    app = FastAPI()

    def person(request: Request) -> str:
        header = request.headers.get("authorization")
        master.seen_auth.append(header)
        if header == f"Bearer {STALE_TOKEN}":
            raise HTTPException(403, "Invalid JWT token")  # Airflow's own answer
        user = TOKENS.get((header or "").removeprefix("Bearer "))
        if user is None:
            raise HTTPException(401, "missing or invalid token")
        return user

    def state_rule(e: dict[str, Any], action: str) -> None:
        # The real master's rules and wording (det_airflow.master.experiment_state.change_state), which
        # test_real_master.py checks against the master itself; the stand-in keeps no state changes.
        if action == "archive" and e["state"] not in FINISHED:
            raise HTTPException(
                409, f"experiment {e['id']} is {e['state']}; only finished experiments can be archived"
            )
        allowed = TRANSITIONS.get(action)
        if allowed is not None and e["state"] != allowed[1] and e["state"] not in allowed[0]:
            raise HTTPException(409, f"experiment {e['id']} is {e['state']}; cannot {action} it")

    def check_change(user: str, e: dict[str, Any], action: str) -> None:
        # The real master's rule and wording (det_airflow.master.authz).
        if e["owner"] != user and user not in ADMINS:
            raise HTTPException(
                403,
                f"user '{user}' may not {action} experiment {e['id']}: it belongs to "
                f"'{e['owner']}'; only its owner or an admin may change it",
            )

    def experiment_or_404(experiment_id: int) -> dict[str, Any]:
        master.advance(experiment_id)
        if experiment_id not in master.experiments:
            raise HTTPException(404, f"experiment {experiment_id} not found")
        return master.experiments[experiment_id]

    def trials_of(experiment_id: int) -> list[dict[str, Any]]:
        return [t for t in master.trials.values() if t["experiment_id"] == experiment_id]

    @app.post("/auth/token", status_code=201)
    async def token(request: Request) -> Any:
        body = await request.json()
        if USERS.get(body.get("username")) != body.get("password"):
            return JSONResponse({"detail": "Invalid credentials"}, status_code=401)
        return {"access_token": next(t for t, u in TOKENS.items() if u == body["username"])}

    api = "/det/api/v1"
    auth = [Depends(person)]

    @app.post(f"{api}/experiments")
    async def create(request: Request, user: str = Depends(person)) -> Any:
        body = await request.json()
        master.create_requests.append(body)
        config = yaml.safe_load(body["config"])
        if config.get("name") == "rejected":
            raise HTTPException(400, "resources.resource_pool: pool 'gpu' does not exist")
        if body.get("request_id") in master.by_request_id:  # a resend: the experiment it created
            return {
                "experiment": master.experiments[master.by_request_id[body["request_id"]]],
                "warnings": [],
            }
        master.created.append(body)
        experiment_id = max(master.experiments) + 1
        if body.get("request_id"):
            master.by_request_id[body["request_id"]] = experiment_id
        state = "PAUSED" if body.get("paused") else "ACTIVE"
        master.experiments[experiment_id] = _experiment(
            experiment_id, name=config.get("name", ""), state=state, owner=user
        )
        master.configs[experiment_id] = config
        master.ticks[experiment_id] = 0
        return {"experiment": master.experiments[experiment_id], "warnings": []}

    @app.get(f"{api}/experiments", dependencies=auth)
    def list_experiments(all: bool = False) -> Any:  # noqa: A002
        return {"experiments": [e for e in master.experiments.values() if all or not e["archived"]]}

    @app.get(f"{api}/experiments/{{experiment_id}}", dependencies=auth)
    def get_experiment(experiment_id: int) -> Any:
        e = experiment_or_404(experiment_id)
        return {
            "experiment": e,
            "trials": trials_of(experiment_id),
            "config": master.configs.get(experiment_id, {}),
        }

    @app.get(f"{api}/experiments/{{experiment_id}}/config", dependencies=auth)
    def get_config(experiment_id: int) -> Any:
        experiment_or_404(experiment_id)
        return {"config": master.configs.get(experiment_id, {})}

    @app.get(f"{api}/experiments/{{experiment_id}}/trials", dependencies=auth)
    def list_trials(experiment_id: int) -> Any:
        experiment_or_404(experiment_id)
        return {"trials": trials_of(experiment_id)}

    @app.get(f"{api}/experiments/{{experiment_id}}/checkpoints", dependencies=auth)
    def list_checkpoints(experiment_id: int) -> Any:
        experiment_or_404(experiment_id)
        return {
            "checkpoints": [c for c in master.checkpoints.values() if c["experiment_id"] == experiment_id]
        }

    @app.post(f"{api}/experiments/{{experiment_id}}/labels")
    async def add_label(experiment_id: int, request: Request, user: str = Depends(person)) -> Any:
        e = experiment_or_404(experiment_id)
        check_change(user, e, "label")
        label = (await request.json())["label"]
        if label not in e["labels"]:
            e["labels"].append(label)
        return {"experiment": e}

    @app.delete(f"{api}/experiments/{{experiment_id}}/labels/{{label:path}}")
    def remove_label(experiment_id: int, label: str, user: str = Depends(person)) -> Any:
        e = experiment_or_404(experiment_id)
        check_change(user, e, "unlabel")
        if label in e["labels"]:
            e["labels"].remove(label)
        return {"experiment": e}

    @app.patch(f"{api}/experiments/{{experiment_id}}")
    async def patch(experiment_id: int, request: Request, user: str = Depends(person)) -> Any:
        e = experiment_or_404(experiment_id)
        check_change(user, e, "edit")
        e.update({k: v for k, v in (await request.json()).items() if k in ("name", "description")})
        return {"experiment": e}

    @app.post(f"{api}/experiments/{{experiment_id}}/{{action}}")
    def act(experiment_id: int, action: str, user: str = Depends(person)) -> Any:
        e = experiment_or_404(experiment_id)
        if action not in ("pause", "activate", "cancel", "kill", "archive", "unarchive"):
            raise HTTPException(404, "Not Found")
        check_change(user, e, action)
        state_rule(e, action)
        master.actions.append((action, experiment_id))
        return {"experiment": e}

    @app.delete(f"{api}/experiments/{{experiment_id}}")
    def delete(experiment_id: int, user: str = Depends(person)) -> Any:
        e = experiment_or_404(experiment_id)
        check_change(user, e, "delete")
        if e["state"] not in FINISHED:
            raise HTTPException(
                409, f"experiment {experiment_id} is {e['state']}; cancel or kill it before deleting it"
            )
        master.actions.append(("delete", experiment_id))
        del master.experiments[experiment_id]
        return {"not_removed": master.not_removed, "removing": master.removing}

    @app.post(f"{api}/trials/{{trial_id}}/kill")
    def kill_trial(trial_id: int, user: str = Depends(person)) -> Any:
        if trial_id not in master.trials:
            raise HTTPException(404, f"trial {trial_id} not found")
        trial = master.trials[trial_id]
        check_change(user, master.experiments[trial["experiment_id"]], f"kill trial {trial_id} of")
        master.actions.append(("kill trial", trial_id))
        trial["state"] = "STOPPING_KILLED"
        return {"trial": trial}

    def checkpoint_or_404(uuid: str) -> dict[str, Any]:
        if uuid not in master.checkpoints:
            raise HTTPException(404, f"checkpoint {uuid} not found")
        return master.checkpoints[uuid]

    @app.get(f"{api}/checkpoints/{{uuid}}", dependencies=auth)
    def get_checkpoint(uuid: str) -> Any:
        return {"checkpoint": checkpoint_or_404(uuid)}

    @app.delete(f"{api}/checkpoints/{{uuid}}")
    def delete_checkpoint(uuid: str, user: str = Depends(person)) -> Any:
        c = checkpoint_or_404(uuid)
        check_change(user, master.experiments[c["experiment_id"]], f"delete checkpoint {uuid} of")
        master.actions.append(("delete checkpoint", uuid))
        c["state"] = "DELETED"
        return {}

    @app.get(f"{api}/trials/{{trial_id}}", dependencies=auth)
    def get_trial(trial_id: int) -> Any:
        if trial_id not in master.trials:
            raise HTTPException(404, f"trial {trial_id} not found")
        return {"trial": master.trials[trial_id]}

    @app.get(f"{api}/trials/{{trial_id}}/metrics", dependencies=auth)
    def get_metrics(trial_id: int, group: str | None = None) -> Any:
        rows = master.metrics.get(trial_id, [])
        return {"metrics": [m for m in rows if group is None or m["group"] == group]}

    @app.get(f"{api}/trials/{{trial_id}}/logs", dependencies=auth)
    def get_logs(
        trial_id: int,
        after: int | None = None,
        limit: int | None = None,
        tail: int | None = None,
        rank: Annotated[list[int] | None, Query()] = None,
        level: str | None = None,
        timestamp_before: datetime | None = None,
        timestamp_after: datetime | None = None,
    ) -> Any:
        if trial_id not in master.trials:
            raise HTTPException(404, f"trial {trial_id} not found")
        master.advance(master.trials[trial_id]["experiment_id"])
        master.log_queries.append({"timestamp_before": timestamp_before, "timestamp_after": timestamp_after})
        # The filters of the master's route: these ranks, this level or higher, this time window.
        wanted = None if level is None else LOG_LEVELS[LOG_LEVELS.index(level) :]

        def in_window(line: dict[str, Any]) -> bool:
            when = datetime.fromisoformat(line["timestamp"])
            return (timestamp_before is None or when < timestamp_before) and (
                timestamp_after is None or when > timestamp_after
            )

        lines = [
            line
            for line in master.logs.get(trial_id, [])
            if (after is None or line["id"] > after)
            and (not rank or line["rank"] in rank)
            and (wanted is None or str(line["level"]).removeprefix("LOG_LEVEL_") in wanted)
            and in_window(line)
        ]
        if tail is not None:
            lines = lines[-tail:] if tail else []
        if limit is not None:
            lines = lines[:limit]
        return {"logs": lines, "trial_state": master.trials[trial_id]["state"]}

    @app.get(f"{api}/me")
    def me(user: str = Depends(person)) -> Any:
        return {"username": user}

    @app.get(f"{api}/experiments/{{experiment_id}}/context", dependencies=auth)
    def context(experiment_id: int) -> Response:
        return Response(b"", media_type="application/gzip")

    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def _served_master() -> Iterator[FakeMaster]:
    master = FakeMaster()
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(master), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the fake master did not start")
        time.sleep(0.02)
    master.url = f"http://127.0.0.1:{port}"
    yield master
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean environment: our own config folder, no DET_* variables, fast polling."""
    for name in ("DET_MASTER", "DET_USER", "DET_PASS", "DET_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    config_dir = tmp_path / "det-config"
    monkeypatch.setenv("DET_AIRFLOW_CONFIG_DIR", str(config_dir))
    monkeypatch.setattr(logs_cli, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(experiment_cli, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # local test mode keeps failed runs there
    return config_dir


@pytest.fixture
def master(_served_master: FakeMaster, cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    """The stand-in master, fresh, as $DET_MASTER, with a stored login for it."""
    from det_airflow.api.user import store_login

    _served_master.reset()
    monkeypatch.setenv("DET_MASTER", _served_master.url)
    store_login(_served_master.url, "admin", TOKEN)
    return _served_master


class _AnswerLosingProxy(http.server.BaseHTTPRequestHandler):
    """Forwards to the stand-in master, but resets the connection instead of passing on the answer
    to the first ``POST .../experiments``: the master created the experiment, the client never hears."""

    upstream = ""
    lost: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        with httpx.Client(base_url=self.upstream) as client:
            answer = client.request(self.command, self.path, content=body, headers=headers)
        if self.command == "POST" and self.path.endswith("/experiments") and not self.lost:
            self.lost.append(self.path)
            # Reset the connection (linger 0), as a crashing server or a dropped link would.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        self.send_response(answer.status_code)
        for name in ("content-type",):
            if name in answer.headers:
                self.send_header(name, answer.headers[name])
        self.send_header("content-length", str(len(answer.content)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_DELETE = do_PATCH = _forward


@pytest.fixture
def answer_losing_master(master: FakeMaster) -> Iterator[tuple[str, list[str]]]:
    """The stand-in master behind a proxy that loses the first create's answer: (URL, lost paths)."""
    handler = type("Proxy", (_AnswerLosingProxy,), {"upstream": master.url, "lost": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    from det_airflow.api.user import store_login

    store_login(url, "admin", TOKEN)
    yield url, handler.lost
    server.shutdown()
    server.server_close()


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def det(capsys: pytest.CaptureFixture[str]) -> Any:
    """Runs ``det ARGS...`` in-process; returns exit code and captured output."""

    def run(*args: str) -> Result:
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def run_det_script(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
    """Runs the installed ``det`` console script in a subprocess."""
    if not DET_SCRIPT.exists():
        pytest.skip(f"{DET_SCRIPT} is not installed: run .venv/bin/pip install -e . --no-deps")
    proc = subprocess.run(
        [str(DET_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)
