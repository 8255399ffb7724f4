"""A stand-in master that answers a task's two routes, and a task program run against it as a real
subprocess (``python3 -m det_airflow.tasks.<name>``), the way a trial runner starts it."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from det_airflow import trial_env
from det_airflow.api._http import API_PREFIX
from tests.http_stub import serve

TOKEN = "task-trial-token"
READY_SECONDS = 120.0


@dataclass
class StandInMaster:
    """Answers ``GET /runtime/trials/<id>/task`` from ``tasks`` and records ``POST .../task/ready``."""

    url: str = ""
    tasks: dict[int, Any] = field(default_factory=dict)
    ready: dict[int, dict[str, Any]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    trial_ids: Iterator[int] = field(default_factory=lambda: itertools.count(100))

    def add(self, task: Any) -> int:
        """A new trial whose task is ``task``; answers the trial's id."""
        trial_id = next(self.trial_ids)
        self.tasks[trial_id] = task
        return trial_id

    def wait_ready(self, trial_id: int, process: subprocess.Popen[bytes], output: Path) -> dict[str, Any]:
        deadline = time.monotonic() + READY_SECONDS
        with self.changed:
            while trial_id not in self.ready:
                if process.poll() is not None:
                    pytest.fail(f"the task program exited ({process.returncode}):\n{output.read_text()}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the task program never reported ready:\n{output.read_text()}")
                self.changed.wait(0.2)
            return self.ready[trial_id]


@pytest.fixture(scope="module")
def master() -> Iterator[StandInMaster]:
    stand_in = StandInMaster()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _trial(self, suffix: str) -> int | None:
            path = self.path.removeprefix(f"{API_PREFIX}/runtime/trials/")
            trial, _, rest = path.partition("/")
            return int(trial) if rest == suffix and trial.isdigit() else None

        def do_GET(self) -> None:
            trial = self._trial("task")
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._answer(401, {"detail": "bad token"})
            elif trial not in stand_in.tasks:
                self._answer(404, {"detail": f"no such route: {self.path}"})
            else:
                self._answer(200, stand_in.tasks[trial])

        def do_POST(self) -> None:
            trial = self._trial("task/ready")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            if trial is None or self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._answer(404, {"detail": f"no such route: {self.path}"})
                return
            with stand_in.changed:
                stand_in.ready[trial] = body
                stand_in.changed.notify_all()
            self._answer(200, {})

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    with serve(Handler) as url:
        stand_in.url = url
        yield stand_in


def task_answer(
    kind: str, task_id: int, *, args: dict[str, Any] | None = None, idle: float | None = None
) -> dict[str, Any]:
    return {
        "id": task_id,
        "type": kind,
        "args": args or {},
        "proxy_prefix": f"/det/proxy/{task_id}/",
        "bind_address": "127.0.0.1",
        "idle_timeout": idle,
    }


@dataclass
class TaskProgram:
    """A task program running against the stand-in master, once it reported ready."""

    process: subprocess.Popen[bytes]
    output_file: Path
    port: int
    secret: str
    prefix: str

    @property
    def output(self) -> str:
        return self.output_file.read_text(errors="replace")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the task program did not exit within {timeout:g} s:\n{self.output}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(60)


def start_program(
    name: str, master: StandInMaster, trial_id: int, cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python3 -m det_airflow.tasks.<name>`` as trial ``trial_id``; output to ``cwd/../<name>-<id>.log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env |= {trial_env.MASTER: master.url, trial_env.SESSION_TOKEN: TOKEN, trial_env.TRIAL_ID: str(trial_id)}
    env |= extra_env or {}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[3]), env.get("PYTHONPATH", "")])
    output = open(cwd.parent / f"{name}-{trial_id}.log", "wb")  # noqa: SIM115 - the child writes it
    with output:
        return subprocess.Popen(
            [sys.executable, "-m", f"det_airflow.tasks.{name}"],
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run_task(
    name: str, master: StandInMaster, task: dict[str, Any], cwd: Path, extra_env: dict[str, str] | None = None
) -> TaskProgram:
    """Start the program for ``task`` and wait until it reported ready."""
    cwd.mkdir(parents=True, exist_ok=True)
    trial_id = master.add(task)
    process = start_program(name, master, trial_id, cwd, extra_env)
    output = cwd.parent / f"{name}-{trial_id}.log"
    ready = master.wait_ready(trial_id, process, output)
    return TaskProgram(process, output, int(ready["port"]), str(ready["secret"]), task["proxy_prefix"])
