"""`det notebook|tensorboard|cmd|shell|task ...` against the master's own routes (the people app on
SQLite, served by uvicorn on loopback), with the test standing in for the runner: it takes the
task's trial, writes its logs, says where its server listens and ends it, through the master's code.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import FastAPI, HTTPException, Request
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.routing import Mount, WebSocketRoute
from starlette.websockets import WebSocket

from det_airflow.api.models import Task
from det_airflow.api.user import store_login
from det_airflow.cli import task as task_cli
from det_airflow.cli.command import exit_status
from det_airflow.cli.main import build_parser
from det_airflow.cli.terminal import END_OF_INPUT
from det_airflow.master import schema, tasks, trials
from det_airflow.master.trial_logs import append_logs
from tests.unit.master.creating import Creator, creator
from tests.unit.master.people_app import ROLES, People, people

from .conftest import DET_SCRIPT, _free_port, run_det_script

__all__ = ["creator", "people"]  # the master's fixtures, used here

SLOT_TASK = {"run_id": None, "task_id": "trial", "map_index": 0, "try_number": 1}


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a presto table."""
    lines = text.rstrip("\n").splitlines()
    header = [cell.strip() for cell in lines[0].split("|")]
    return header, [[cell.strip() for cell in line.split("|")] for line in lines[2:]]


async def _user_from_bearer(request: Request) -> SimpleAuthManagerUser:
    """Airflow's login stands here as ``Bearer <user>-token``; every decision after it is the master's."""
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    name = token.removesuffix("-token")
    if not token.endswith("-token") or name not in ROLES:
        raise HTTPException(401, "Not authenticated")
    return SimpleAuthManagerUser(username=name, role=ROLES[name])


async def _shell_terminal(websocket: WebSocket) -> None:
    """What the proxy and a shell's server do for ``/det/proxy/<id>/ws``, as far as the CLI can
    tell: refuse a connection without the login, echo the terminal's bytes, and at the end of input
    (Ctrl-D) end with the status its last line names (``exit N``)."""
    if websocket.headers.get("authorization") != "Bearer alice-token":
        await websocket.close(code=1008)
        return
    await websocket.accept()
    command = websocket.query_params.getlist("command")
    await websocket.send_bytes(f"running {command or 'the login shell'}\r\n".encode())
    typed = b""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") or b""
        if data.endswith(END_OF_INPUT):
            await websocket.send_bytes(data[:-1])
            last = (typed + data[:-1]).splitlines()[-1:] or [b""]
            code = int(last[0].split()[1]) if last[0].startswith(b"exit ") else 0
            await websocket.send_text(json.dumps({"exit": code}))
            await websocket.close()
            return
        typed += data
        await websocket.send_bytes(data)


@dataclass
class Cluster:
    """The master at ``url``, and what its runner would do to a task's trial."""

    people: People
    url: str

    def login(self, user: str) -> None:
        store_login(self.url, user, f"{user}-token")

    def task_ids(self) -> list[int]:
        with self.people.db.read() as conn:
            return list(conn.execute(select(schema.tasks.c.id).order_by(schema.tasks.c.id)).scalars())

    def start(self, task_id: int) -> int:
        """The task's trial starts on a host and its program runs; answers the trial's ID."""
        with self.people.db.begin() as conn:
            answer = trials.acquire(
                conn, task_id, 0, {**SLOT_TASK, "dag_id": f"det_exp_{task_id}"}, dry_run=False
            )
            assert answer["status"] == "run", answer
            trial = trials.get_trial(conn, answer["trial"].id)
            trials.mark_running(conn, trial, "its program reported")
            return int(trial.id)

    def log(self, trial_id: int, *messages: str) -> None:
        with self.people.db.begin() as conn:
            append_logs(conn, trial_id, [{"message": m + "\n", "rank": 0, "level": "INFO"} for m in messages])

    def serve(self, trial_id: int) -> None:
        with self.people.db.begin() as conn:
            tasks.mark_ready(conn, trial_id, 4321, "s" * 32, None, by_runner=True)  # as its runner says

    def exit(self, trial_id: int, code: int) -> None:
        with self.people.db.begin() as conn:
            trials.exit_run(conn, trial_id, code)

    def in_background(self, script: Callable[[int], None]) -> threading.Thread:
        """Runs ``script`` with the ID of the first task, once the CLI has started it."""
        failures: list[BaseException] = []

        def run() -> None:
            deadline = time.monotonic() + 30
            while not self.task_ids():
                assert time.monotonic() < deadline, "no task was started"
                time.sleep(0.01)
            try:
                script(self.task_ids()[0])
            except BaseException as exc:  # reported by the test through the thread's `failures`
                failures.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.failures = failures  # type: ignore[attr-defined]
        thread.start()
        return thread


def _det_script() -> str:
    """The installed ``det``, for a test that needs its own stdin or environment."""
    if not DET_SCRIPT.exists():
        pytest.skip(f"{DET_SCRIPT} is not installed: run .venv/bin/pip install -e . --no-deps")
    return str(DET_SCRIPT)


def _joined(thread: threading.Thread) -> None:
    thread.join(timeout=30)
    assert not thread.is_alive()
    for failure in thread.failures:  # type: ignore[attr-defined]
        raise failure


@pytest.fixture
def cluster(
    people: People, creator: Creator, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    app = people.client.app
    assert isinstance(app, FastAPI)
    app.dependency_overrides[get_user] = _user_from_bearer
    # Airflow serves the master's app under /det, beside the proxy.
    site = Starlette(
        routes=[WebSocketRoute("/det/proxy/{task_id:int}/ws", _shell_terminal), Mount("/det", app=app)]
    )
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(site, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the master did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("DET_MASTER", url)
    monkeypatch.setattr(task_cli, "POLL_INTERVAL", 0.01)
    from det_airflow.cli import logs as logs_cli

    monkeypatch.setattr(logs_cli, "POLL_INTERVAL", 0.01)
    found = Cluster(people, url)
    found.login("alice")
    yield found
    server.should_exit = True
    thread.join(timeout=10)


# --- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            "notebook start --config-file nb.yaml --config resources.slots=2 --config idle_timeout=1h "
            "--context src -d --no-browser",
            {
                "config_file": "nb.yaml",
                "config_overrides": ["resources.slots=2", "idle_timeout=1h"],
                "context": "src",
                "detach": True,
                "no_browser": True,
            },
        ),
        ("notebook list -a --csv", {"all": True, "csv": True}),
        ("notebook ls", {"all": False}),
        ("notebook kill 3 4", {"task_ids": [3, 4]}),
        ("notebook logs -f --tail 5 3", {"follow": True, "tail": 5, "task_id": 3}),
        ("notebook open 3 --no-browser", {"task_id": 3, "no_browser": True}),
        ("tensorboard start 1 2 -d", {"experiment_ids": [1, 2], "trial_ids": [], "detach": True}),
        ("tensorboard start --trial-ids 7 8", {"experiment_ids": [], "trial_ids": [7, 8]}),
        ("tensorboard start 1 -t 7", {"experiment_ids": [1], "trial_ids": [7]}),
        ("tensorboard open 9", {"task_id": 9}),
        ("tensorboard kill 9", {"task_ids": [9]}),
        ("cmd run -d python -c 'x' -d", {"detach": True, "command": ["python", "-c", "'x'", "-d"]}),
        ("command run --config resources.slots=0 -- ls -la", {"command": ["--", "ls", "-la"]}),
        ("cmd logs --head 2 5", {"head": 2, "task_id": 5}),
        ("shell start -d -- bash -l", {"detach": True, "command": ["bash", "-l"]}),
        ("shell start", {"detach": False, "command": []}),
        ("shell open 5 -- top -b", {"task_id": 5, "command": ["top", "-b"]}),
        ("shell list -a", {"all": True}),
        ("task list -a --json", {"all": True, "json": True}),
        ("task logs -f 5", {"follow": True, "task_id": 5}),
    ],
)
def test_every_verb_parses(argv: str, expected: dict[str, Any]) -> None:
    args = build_parser().parse_args(argv.split())
    assert {key: getattr(args, key) for key in expected} == expected


@pytest.mark.parametrize(
    "argv",
    ["notebook kill", "notebook logs", "notebook open x", "tensorboard start -t", "shell open", "task logs"],
)
def test_a_verb_without_its_arguments_is_a_usage_error(det: Any, argv: str) -> None:
    result = det(*argv.split())
    assert result.code == 2
    assert "usage: det" in result.err


# --- the config --------------------------------------------------------------------------------------


def test_config_overrides_are_set_over_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "task.yaml"
    config.write_text("# my notebook\nresources:\n  slots: 1\n  resource_pool: gpus\nidle_timeout: 30m\n")
    assert task_cli.task_config_text(str(config), []) == config.read_text()  # as written
    merged = task_cli.task_config_text(
        str(config), ["resources.slots=2", "environment.environment_variables=[A=1]", "idle_timeout=1h"]
    )
    assert merged is not None
    assert yaml.safe_load(merged) == {
        "resources": {"slots": 2, "resource_pool": "gpus"},
        "idle_timeout": "1h",
        "environment": {"environment_variables": ["A=1"]},
    }
    assert task_cli.task_config_text(None, []) is None


def test_the_task_gets_the_merged_config(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "nb.yaml"
    config.write_text("description: my notebook\nresources: {slots: 1}\n")
    result = det("notebook", "start", "-d", "--config-file", str(config), "--config", "resources.slots=2")
    assert result.code == 0, result.err
    assert result.out == f"Launched notebook 1 at {cluster.url}/det/proxy/1/lab\n"
    header, rows = _table(det("task", "list").out)
    assert rows == [["1", "notebook", "my notebook", "alice", "QUEUED", "2", "default_pool", rows[0][7], ""]]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["notebook", "start", "--config-file", "missing.yaml"], "Error: missing.yaml: no such file\n"),
        (
            ["notebook", "start", "--config", "resources.slots"],
            "Error: --config: expected key=value (e.g. searcher.max_trials=4), got 'resources.slots'\n",
        ),
        (
            ["notebook", "start", "--config", "idle_timout=5m"],
            "Error: idle_timout: not a task config field; did you mean 'idle_timeout'?\n",
        ),
        (
            ["tensorboard", "start"],
            "Error: a TensorBoard needs something to show: experiment IDs, or trial IDs with --trial-ids\n",
        ),
        (["tensorboard", "start", "99"], "Error: experiment 99 not found\n"),
        (["cmd", "run"], "Error: entrypoint: a command needs something to run: det cmd run CMD [ARGS...]\n"),
        (["notebook", "kill", "99"], "Error: task 99 not found\n"),
        (["task", "logs", "99"], "Error: task 99 not found\n"),
        (["shell", "open", "99"], "Error: task 99 not found\n"),
        (
            ["notebook", "start", "--context", "no-such-dir"],
            "Error: context directory no-such-dir does not exist\n",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_failure(det: Any, cluster: Cluster, argv: list[str], error: str) -> None:
    result = det(*argv)
    assert (result.code, result.err) == (1, error)
    assert cluster.task_ids() == []


def test_a_config_file_that_is_not_a_mapping(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "list.yaml"
    config.write_text("- resources\n")
    result = det("shell", "start", "--config-file", str(config))
    assert (result.code, result.err) == (
        1,
        f"Error: {config}: expected a mapping of task config fields, got list\n",
    )


# --- lists ------------------------------------------------------------------------------------------


def test_task_list_shows_every_type_and_all_shows_others(det: Any, cluster: Cluster) -> None:
    assert det("notebook", "start", "-d").code == 0
    assert det("cmd", "run", "-d", "echo", "hi").out == "Launched command 2\n"
    cluster.login("bob")
    assert det("shell", "start", "-d").out.startswith("Launched shell 3 at ")

    header, rows = _table(det("task", "list").out)
    assert header == [
        "Task ID",
        "Type",
        "Description",
        "Owner",
        "State",
        "Slots",
        "Resource Pool",
        "Started",
        "Exit Status",
    ]
    assert [row[:6] for row in rows] == [["3", "shell", "shell", "bob", "QUEUED", "1"]]
    _, rows = _table(det("task", "list", "-a").out)
    assert [row[:4] for row in rows] == [
        ["1", "notebook", "JupyterLab", "alice"],
        ["2", "command", "echo hi", "alice"],
        ["3", "shell", "shell", "bob"],
    ]
    listed = json.loads(det("task", "list", "--all", "--json").out)
    assert [t["type"] for t in listed] == ["notebook", "command", "shell"]


def test_each_type_lists_only_its_own(det: Any, cluster: Cluster) -> None:
    det("notebook", "start", "-d")
    det("cmd", "run", "-d", "true")
    header, rows = _table(det("notebook", "list").out)
    assert header == ["ID", "Owner", "Description", "State", "Exit Status", "Resource Pool"]
    assert rows == [["1", "alice", "JupyterLab", "QUEUED", "", "default_pool"]]
    _, rows = _table(det("cmd", "list").out)
    assert [row[0] for row in rows] == ["2"]
    assert _table(det("shell", "list").out)[1] == []


def test_tensorboard_of_experiments_and_of_trials(det: Any, cluster: Cluster) -> None:
    first = cluster.people.add_experiment(owner="alice")
    trial_a = cluster.people.add_trial(first, state="COMPLETED")
    trial_b = cluster.people.add_trial(first, state="COMPLETED")
    second = cluster.people.add_experiment(owner="alice")
    trial_c = cluster.people.add_trial(second, state="COMPLETED")

    result = det("tensorboard", "start", "-d", str(first))
    assert result.code == 0, result.err
    assert det("tensorboard", "start", "-d", "--trial-ids", str(trial_c)).code == 0
    header, rows = _table(det("tensorboard", "list").out)
    assert header == [
        "ID",
        "Owner",
        "Description",
        "State",
        "Experiment IDs",
        "Trial IDs",
        "Exit Status",
        "Resource Pool",
    ]
    assert [row[4:6] for row in rows] == [
        [str(first), f"{trial_a}, {trial_b}"],
        [str(second), str(trial_c)],
    ]


# --- kill ---------------------------------------------------------------------------------------------


def test_kill_is_for_the_owner_and_names_the_type(det: Any, cluster: Cluster) -> None:
    det("notebook", "start", "-d")
    det("cmd", "run", "-d", "sleep", "100")
    wrong = det("notebook", "kill", "2")
    assert (wrong.code, wrong.err) == (
        1,
        "Error: task 2 is a command, not a notebook: use `det cmd ...` for it\n",
    )
    cluster.login("bob")
    refused = det("notebook", "kill", "1")
    assert refused.code == 1
    assert refused.err.startswith("Error: permission denied: user 'bob' may not kill notebook experiment 1")
    cluster.login("alice")
    assert det("notebook", "kill", "1").out == "Killed notebook 1\n"
    assert det("cmd", "kill", "2").out == "Killed command 2\n"
    _, rows = _table(det("task", "list").out)
    assert {row[4] for row in rows} <= {"TERMINATING", "TERMINATED (CANCELED)"}


# --- det cmd run ------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
def test_cmd_run_prints_the_output_and_exits_with_the_status(det: Any, cluster: Cluster, code: int) -> None:
    def runner(task_id: int) -> None:
        trial_id = cluster.start(task_id)
        cluster.log(trial_id, "hello", "from the command")
        time.sleep(0.2)
        cluster.log(trial_id, "bye")
        cluster.exit(trial_id, code)

    thread = cluster.in_background(runner)
    result = det("cmd", "run", "python3", "-c", "print('hello')")
    _joined(thread)
    assert result.code == code, result.err
    lines = result.out.splitlines()
    assert lines[0] == "Launched command 1"
    assert [line.rsplit("|| INFO: ", 1)[1] for line in lines[1:]] == ["hello", "from the command", "bye"]
    expected_err = "" if code == 0 else "Command 1 ended (ERROR): exit status 3\n"
    assert result.err == expected_err
    logs = det("cmd", "logs", "1")
    assert [line.rsplit(": ", 1)[1] for line in logs.out.splitlines()] == ["hello", "from the command", "bye"]
    assert det("task", "logs", "--tail", "1", "1").out.endswith("|| INFO: bye\n")


def test_cmd_run_sends_the_context_without_what_detignore_leaves_out(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    context = tmp_path / "src"
    (context / "data").mkdir(parents=True)
    (context / "run.py").write_text("print('hi')\n")
    (context / "data" / "big.bin").write_bytes(b"0" * 100)
    (context / ".detignore").write_text("data/\n")
    result = det("cmd", "run", "-d", "--context", str(context), "python3", "run.py")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"Preparing files ({context}) to send to master... 18.0B and 2 files",
        "Launched command 1",
    ]
    stored = cluster.people.experiment(1).context
    with tarfile.open(fileobj=io.BytesIO(stored), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == [".detignore", "run.py"]


@pytest.mark.parametrize(
    ("exit_code", "end_state", "status"),
    [
        (0, "COMPLETED", 0),
        (3, "ERROR", 3),
        (-9, "CANCELED", 137),
        (None, "CANCELED", 1),
        (None, "COMPLETED", 0),
    ],
)
def test_the_exit_status_of_cmd_run(exit_code: int | None, end_state: str, status: int) -> None:
    task = Task.model_validate(
        {
            "id": 1,
            "type": "command",
            "description": "x",
            "owner": "alice",
            "state": "TERMINATED",
            "end_state": end_state,
            "exit_code": exit_code,
            "ready": False,
            "url": None,
            "resource_pool": "default_pool",
            "slots": 1,
            "priority": 42,
            "start_time": None,
            "end_time": None,
            "trial_id": 1,
            "host": None,
            "dag_id": None,
            "dag_run_id": None,
            "command": ["x"],
            "experiment_ids": [],
            "trial_ids": [],
            "idle_timeout": None,
        }
    )
    assert exit_status(task) == status


# --- pages: notebooks and TensorBoards ----------------------------------------------------------------


def test_notebook_start_waits_until_it_serves(det: Any, cluster: Cluster) -> None:
    def runner(task_id: int) -> None:
        time.sleep(0.1)
        trial_id = cluster.start(task_id)
        time.sleep(0.1)
        cluster.serve(trial_id)

    thread = cluster.in_background(runner)
    result = det("notebook", "start", "--no-browser")
    _joined(thread)
    assert result.code == 0, result.err
    url = f"{cluster.url}/det/proxy/1/lab"
    lines = result.out.splitlines()
    assert lines[0] == f"Launched notebook 1 at {url}"
    assert lines[1] == "Notebook 1 is QUEUED"
    assert "Notebook 1 is RUNNING" in lines
    assert lines[-1] == f"Notebook 1 is ready at {url}"


def test_a_notebook_that_ends_before_it_serves_is_an_error(det: Any, cluster: Cluster) -> None:
    def runner(task_id: int) -> None:
        cluster.exit(cluster.start(task_id), 1)

    thread = cluster.in_background(runner)
    result = det("notebook", "start", "--no-browser")
    _joined(thread)
    assert result.code == 1
    assert (
        result.err == "Error: notebook 1 ended (ERROR) before it was ready: `det notebook logs 1` shows why\n"
    )
    assert result.out.splitlines()[-1] == "Notebook 1 is TERMINATED"


def test_open_refuses_a_page_that_does_not_serve(det: Any, cluster: Cluster) -> None:
    det("notebook", "start", "-d")
    result = det("notebook", "open", "1")
    assert (result.code, result.err) == (1, "Error: notebook 1 is not ready: it is QUEUED\n")


def test_open_starts_the_browser_at_the_page(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    experiment = cluster.people.add_experiment(owner="alice")
    cluster.people.add_trial(experiment, state="COMPLETED")
    result = det("tensorboard", "start", "-d", str(experiment))
    assert result.code == 0, result.err
    cluster.serve(cluster.start(cluster.task_ids()[0]))
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    browser.chmod(0o755)
    result = run_det_script("tensorboard", "open", str(cluster.task_ids()[0]), env={"BROWSER": str(browser)})
    assert result.code == 0, result.err
    url = f"{cluster.url}/det/proxy/{cluster.task_ids()[0]}/"
    assert result.out == f"TensorBoard {cluster.task_ids()[0]} is ready at {url}\n"
    assert opened.read_text() == f"{url}\n"


# --- shells -------------------------------------------------------------------------------------------


def test_shell_open_joins_the_terminal_and_exits_with_its_status(det: Any, cluster: Cluster) -> None:
    result = det("shell", "start", "-d")
    assert result.code == 0, result.err
    cluster.serve(cluster.start(1))
    proc = subprocess.run(
        [_det_script(), "shell", "open", "1", "--", "top", "-b"],
        input=b"ls\nexit 5",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == b"running ['top', '-b']\r\nls\nexit 5"


def test_shell_open_refuses_a_shell_that_does_not_serve(det: Any, cluster: Cluster) -> None:
    det("shell", "start", "-d")
    result = det("shell", "open", "1")
    assert (result.code, result.err) == (1, "Error: shell 1 is not ready: it is QUEUED\n")


def test_shell_start_waits_until_it_serves_then_joins_its_terminal(cluster: Cluster) -> None:
    thread = cluster.in_background(lambda task_id: cluster.serve(cluster.start(task_id)))
    proc = subprocess.run(
        [_det_script(), "shell", "start"], input=b"whoami\n", capture_output=True, timeout=60
    )
    _joined(thread)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.startswith(f"Launched shell 1 at {cluster.url}/det/proxy/1/\nShell 1 is QUEUED\n")
    assert out.endswith("running the login shell\r\nwhoami\n")
