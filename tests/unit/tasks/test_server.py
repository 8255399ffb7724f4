"""What the task programs share: the task answer checked on the way in, the environment they need,
the secret kept out of log lines, and no import of Airflow or the master."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from det_airflow.tasks._server import RedactSecret, Task, TaskError
from tests.unit.tasks.conftest import StandInMaster, start_program, task_answer
from tests.unit.test_import_graph import ROOT, imported_modules, python_files

TASKS = ROOT / "det_airflow" / "tasks"


def test_a_good_answer_becomes_a_task() -> None:
    task = Task.from_answer(task_answer("shell", 4, args={"command": ["ls"]}, idle=1.5), "shell")

    assert task == Task(4, "shell", {"command": ["ls"]}, "/det/proxy/4/", "127.0.0.1", 1.5)
    assert task.local_address == "127.0.0.1"


@pytest.mark.parametrize(
    ("bound", "reached"), [("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("10.1.2.3", "10.1.2.3")]
)
def test_a_server_bound_everywhere_is_reached_on_loopback(bound: str, reached: str) -> None:
    answer = task_answer("shell", 4) | {"bind_address": bound}

    assert Task.from_answer(answer, "shell").local_address == reached


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": "4"}, "id: expected an integer, got '4'"),
        ({"type": "notebook"}, "task 4 is a 'notebook' task, not a 'shell' one"),
        ({"args": ["ls"]}, "args: expected an object, got ['ls']"),
        ({"proxy_prefix": "/det/proxy/4"}, "proxy_prefix: expected a path that starts and ends with '/'"),
        ({"bind_address": ""}, "bind_address: expected an address, got ''"),
        ({"idle_timeout": 0}, "idle_timeout: expected seconds above 0 or null, got 0"),
        ({"idle_timeout": True}, "idle_timeout: expected seconds above 0 or null, got True"),
        ({"ready_to": "anyone"}, "ready_to: expected 'runner' or 'master', got 'anyone'"),
    ],
)
def test_a_bad_answer_is_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskError, match=message.replace("[", r"\[").replace("(", r"\(")):
        Task.from_answer(task_answer("shell", 4) | change, "shell")


def test_an_answer_that_is_not_an_object_is_named() -> None:
    with pytest.raises(TaskError, match=r"the master's task answer is not an object: \[\]"):
        Task.from_answer([], "shell")


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"DET_TRIAL_ID": "5"}, "shell: DET_MASTER is not set: this program runs as a task of a master"),
        (
            {"DET_MASTER": "127.0.0.1:9", "DET_TRIAL_ID": "x"},
            "shell: DET_TRIAL_ID: expected an integer, got 'x'",
        ),
    ],
)
def test_a_program_outside_a_task_ends_with_one_line(tmp_path: Path, env: dict[str, str], line: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "det_airflow.tasks.shell"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (done.returncode, done.stdout, done.stderr) == (1, "", line + "\n")


def test_the_secret_is_taken_out_of_log_lines() -> None:
    secret = "s3cret-s3cret-s3cret"
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.addFilter(RedactSecret(secret))
    logger = logging.getLogger("test_the_secret_is_taken_out_of_log_lines")
    logger.addHandler(handler)
    try:
        logger.warning("open http://host/lab?token=%s now", secret)
        logger.warning("nothing to hide in %s", "this")
    finally:
        logger.removeHandler(handler)

    assert written.getvalue() == "open http://host/lab?token=[secret] now\nnothing to hide in this\n"


def test_the_task_programs_import_neither_airflow_nor_the_master() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in python_files(TASKS)
        for line, module in imported_modules(path)
        if module.split(".")[0] == "airflow" or module.startswith("det_airflow.master")
    ]
    assert not found, "trial-side code imports Airflow or the master:\n" + "\n".join(found)


def test_loading_the_task_programs_loads_neither_airflow_nor_the_master() -> None:
    code = (
        "import json, sys\n"
        "import det_airflow.tasks.notebook, det_airflow.tasks.tensorboard, det_airflow.tasks.shell\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'fastapi', 'sqlalchemy')"
        " or m.startswith('det_airflow.master'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("name", ["notebook", "tensorboard", "shell"])
def test_a_bind_address_this_host_lacks_ends_with_one_line(
    name: str, master: StandInMaster, tmp_path: Path
) -> None:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "storage")}
    args = {"sources": [{"experiment_id": 1, "trial_id": 1}], "storage": storage}
    # 192.0.2.0/24 is reserved for documentation: no host has it.
    trial_id = master.add(task_answer(name, 40, args=args) | {"bind_address": "192.0.2.1"})
    process = start_program(name, master, trial_id, tmp_path)

    assert process.wait(60) == 1
    lines = (tmp_path.parent / f"{name}-{trial_id}.log").read_text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: cannot listen at 192.0.2.1: "), lines
