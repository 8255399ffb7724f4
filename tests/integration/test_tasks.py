"""Tasks beside experiments on a real Airflow: a command's output and exit status, a notebook's
kernel, a TensorBoard of a finished experiment and a shell's terminal, all through the master's
authenticated proxy; who may open them; an idle notebook stopping itself."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.integration.det_env import DetEnv, wait_until
from tests.integration.test_authz import call, det, passwords, run_det, tokens

pytestmark = pytest.mark.integration

__all__ = ["det", "passwords", "tokens"]  # the module's fixtures, shared with test_authz

# Training losses a float32 holds exactly: TensorBoard's scalars must give back these very numbers.
LOSSES = [0.5, 0.25, 0.125, 0.0625]
TRAIN_PY = f"""
import det_airflow as det

with det.core.init() as core:
    for step, loss in enumerate({LOSSES!r}, start=1):
        core.train.report_training_metrics(steps_completed=step, metrics={{"loss": loss}})
    core.train.report_validation_metrics(steps_completed=len({LOSSES!r}), metrics={{"loss": {LOSSES[-1]!r}}})
"""


def start_task(det: DetEnv, tokens: dict[str, str], user: str, **body: Any) -> dict[str, Any]:
    answer = call(det, user, tokens, "POST", "/tasks", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["task"])


def task(det: DetEnv, tokens: dict[str, str], task_id: int) -> dict[str, Any]:
    return dict(call(det, "admin", tokens, "GET", f"/tasks/{task_id}").json()["task"])


def wait_ready(det: DetEnv, tokens: dict[str, str], task_id: int, timeout: float = 240) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        found = task(det, tokens, task_id)
        assert found["state"] != "TERMINATED", found
        return found if found["ready"] else None

    return wait_until(ready, f"task {task_id} serving", timeout=timeout)


def wait_terminated(
    det: DetEnv, tokens: dict[str, str], task_id: int, timeout: float = 180
) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        found = task(det, tokens, task_id)
        return found if found["state"] == "TERMINATED" else None

    return wait_until(ended, f"task {task_id} ended", timeout=timeout)


def proxy(
    det: DetEnv, tokens: dict[str, str], user: str, method: str, path: str, **kw: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {tokens[user]}", **kw.pop("headers", {})}
    with httpx.Client(base_url=det.af.url, timeout=60) as client:
        return client.request(method, path, headers=headers, **kw)


def ws_url(det: DetEnv, path: str) -> str:
    return det.af.url.replace("http://", "ws://", 1) + path


def job_ids(det: DetEnv, tokens: dict[str, str]) -> list[int]:
    return [job["id"] for job in call(det, "admin", tokens, "GET", "/jobs").json()["jobs"]]


def test_a_command_streams_its_output_and_ends_with_its_exit_status(
    det: DetEnv, passwords: dict[str, str], tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "script.py").write_text(
        "import sys\nprint('hello from the command', flush=True)\nsys.exit(3)\n"
    )
    ran = run_det(
        det,
        "alice",
        passwords["alice"],
        tmp_path / "cli",
        "cmd",
        "run",
        "--context",
        str(context),
        "python3",
        "script.py",
    )
    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert "hello from the command" in ran.stdout

    listed = run_det(det, "alice", passwords["alice"], tmp_path / "cli", "task", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "python3 script.py" in line)
    assert "command" in row and "alice" in row and "TERMINATED" in row


def test_a_notebook_runs_code_through_the_proxy_for_its_owner_only(
    det: DetEnv, tokens: dict[str, str]
) -> None:
    notebook = start_task(det, tokens, "alice", type="notebook")
    assert notebook["id"] in job_ids(det, tokens)
    notebook = wait_ready(det, tokens, notebook["id"])
    base = f"/det/proxy/{notebook['id']}"

    kernel = proxy(det, tokens, "alice", "POST", f"{base}/api/kernels", json={})
    assert kernel.status_code == 201, kernel.text
    kernel_id = kernel.json()["id"]
    with connect(
        ws_url(det, f"{base}/api/kernels/{kernel_id}/channels"),
        additional_headers={"Authorization": f"Bearer {tokens['alice']}"},
        open_timeout=30,
    ) as ws:
        msg_id = uuid.uuid4().hex
        ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "alice",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {"code": "1+1", "silent": False},
                    "channel": "shell",
                }
            )
        )
        deadline = time.monotonic() + 60
        result = None
        while result is None and time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=60))
            if (
                message.get("msg_type") == "execute_result"
                and message["parent_header"].get("msg_id") == msg_id
            ):
                result = message["content"]["data"]["text/plain"]
    assert result == "2"

    for user in ("bob", "viewer"):
        assert proxy(det, tokens, user, "GET", f"{base}/api/status").status_code == 403
        with pytest.raises(InvalidStatus) as refused:
            connect(
                ws_url(det, f"{base}/api/kernels/{kernel_id}/channels"),
                additional_headers={"Authorization": f"Bearer {tokens[user]}"},
                open_timeout=30,
            )
        assert refused.value.response.status_code == 403
    assert proxy(det, tokens, "admin", "GET", f"{base}/api/status").status_code == 200
    assert (
        proxy(det, tokens, "alice", "GET", f"{base}/api/status", headers={"Authorization": ""}).status_code
        == 401
    )

    killed = call(det, "alice", tokens, "POST", f"/tasks/{notebook['id']}/kill")
    assert killed.status_code == 200, killed.text
    ended = wait_terminated(det, tokens, notebook["id"])
    assert ended["end_state"] == "CANCELED"
    assert notebook["id"] not in job_ids(det, tokens)
    assert proxy(det, tokens, "alice", "GET", f"{base}/api/status").status_code == 409


def test_a_browser_opens_a_notebook_on_its_own_origin_without_its_airflow_login(
    det: DetEnv, tokens: dict[str, str]
) -> None:
    """On a real Airflow (the master on loopback: tasks under *.localhost): a browser that opens the
    notebook with Airflow's login cookie is sent to the task's own origin, gets a session of that
    origin and JupyterLab there; the login cookie reaches neither the task nor that origin."""
    notebook = wait_ready(det, tokens, start_task(det, tokens, "alice", type="notebook")["id"])
    task_id = notebook["id"]
    port = det.af.url.rsplit(":", 1)[1]
    host = f"task-{task_id}.localhost:{port}"
    login = {"Cookie": f"_token={tokens['alice']}"}
    with httpx.Client(base_url=det.af.url, timeout=60, follow_redirects=False) as client:
        sent = client.get(f"/det/proxy/{task_id}/api/status", headers=login)
        assert sent.status_code == 303, sent.text
        location = httpx.URL(sent.headers["location"])
        assert (location.host, location.port) == (f"task-{task_id}.localhost", int(port))
        assert location.path == f"/det/proxy/{task_id}/_det/login"
        # *.localhost is loopback to browsers; here the Host header says which origin is asked.
        taken = client.get(f"{location.path}?{location.query.decode()}", headers={"Host": host})
        assert taken.status_code == 303, taken.text
        assert taken.headers["location"] == f"/det/proxy/{task_id}/api/status"
        session = taken.cookies["det_task_session"]
        page = client.get(
            taken.headers["location"], headers={"Host": host, "Cookie": f"det_task_session={session}"}
        )
        assert page.status_code == 200, page.text
        assert "started" in page.json()  # JupyterLab's own answer
        # Airflow's login is no login on the task's origin; nothing else of the master is served there.
        assert (
            client.get(f"/det/proxy/{task_id}/api/status", headers={"Host": host, **login}).status_code == 303
        )
        assert client.get("/det/api/v1/me", headers={"Host": host, **login}).status_code == 404
    assert call(det, "alice", tokens, "POST", f"/tasks/{task_id}/kill").status_code == 200


def test_a_tensorboard_serves_the_stored_metrics(
    det: DetEnv, passwords: dict[str, str], tokens: dict[str, str], tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = {
        "name": "tensorboard-source",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": len(LOSSES)}},
        "max_restarts": 0,
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    alice = det.as_user("alice", passwords["alice"], tmp_path / "cli")
    experiment_id = alice.create(tmp_path / "exp.yaml", context)
    finished = det.wait_experiment(experiment_id)
    assert finished["experiment"]["state"] == "COMPLETED", finished
    (trial,) = call(det, "alice", tokens, "GET", f"/experiments/{experiment_id}/trials").json()["trials"]
    stored = call(det, "alice", tokens, "GET", f"/trials/{trial['id']}/metrics?group=training").json()[
        "metrics"
    ]
    assert [(m["steps_completed"], m["metrics"]["loss"]) for m in stored] == list(enumerate(LOSSES, start=1))

    board = start_task(det, tokens, "alice", type="tensorboard", experiment_ids=[experiment_id])
    board = wait_ready(det, tokens, board["id"])
    base = f"/det/proxy/{board['id']}"

    def scalars() -> list[list[float]] | None:
        tags = proxy(det, tokens, "bob", "GET", f"{base}/data/plugin/scalars/tags")
        assert tags.status_code == 200, tags.text
        for run, run_tags in tags.json().items():
            if "training/loss" in run_tags:
                answer = proxy(
                    det,
                    tokens,
                    "bob",
                    "GET",
                    f"{base}/data/plugin/scalars/scalars",
                    params={"run": run, "tag": "training/loss"},
                )
                assert answer.status_code == 200, answer.text
                points = answer.json()
                return points if len(points) == len(LOSSES) else None
        return None

    points = wait_until(scalars, "TensorBoard's training/loss scalars", timeout=120)
    assert [(step, value) for _, step, value in points] == list(enumerate(LOSSES, start=1))
    assert call(det, "alice", tokens, "POST", f"/tasks/{board['id']}/kill").status_code == 200


def test_a_shell_runs_a_command_through_its_terminal(det: DetEnv, tokens: dict[str, str]) -> None:
    shell = start_task(det, tokens, "alice", type="shell")
    shell = wait_ready(det, tokens, shell["id"])
    path = f"/det/proxy/{shell['id']}/ws"
    with pytest.raises(InvalidStatus) as refused:
        connect(
            ws_url(det, path),
            additional_headers={"Authorization": f"Bearer {tokens['bob']}"},
            open_timeout=30,
        )
    assert refused.value.response.status_code == 403

    output = b""
    exit_code = None
    with connect(
        ws_url(det, path), additional_headers={"Authorization": f"Bearer {tokens['alice']}"}, open_timeout=30
    ) as ws:
        ws.send(json.dumps({"resize": [80, 24]}))
        ws.send(b"echo hello-$((40+2))\n")
        deadline = time.monotonic() + 60
        while b"hello-42" not in output and time.monotonic() < deadline:
            frame = ws.recv(timeout=60)
            if isinstance(frame, bytes):
                output += frame
        ws.send(b"exit 5\n")
        while exit_code is None and time.monotonic() < deadline:
            frame = ws.recv(timeout=60)
            if isinstance(frame, str):
                exit_code = json.loads(frame).get("exit")
    assert b"hello-42" in output
    assert exit_code == 5
    assert call(det, "alice", tokens, "POST", f"/tasks/{shell['id']}/kill").status_code == 200
    wait_terminated(det, tokens, shell["id"])


def test_an_idle_notebook_stops_itself_and_frees_its_slots(det: DetEnv, tokens: dict[str, str]) -> None:
    notebook = start_task(det, tokens, "alice", type="notebook", config="idle_timeout: 10s\n")
    wait_ready(det, tokens, notebook["id"])
    ended = wait_terminated(det, tokens, notebook["id"], timeout=240)
    assert ended["end_state"] == "COMPLETED", ended
    assert notebook["id"] not in job_ids(det, tokens)
