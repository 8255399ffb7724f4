"""The shell task's program: a terminal per WebSocket connection at ``<proxy_prefix>ws``, opened by
the proxy's secret alone, ending with the process's exit code."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.unit.tasks.conftest import StandInMaster, TaskProgram, run_task, start_program, task_answer


@pytest.fixture(scope="module")
def shell(master: StandInMaster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskProgram]:
    context = tmp_path_factory.mktemp("shell") / "context"
    program = run_task("shell", master, task_answer("shell", 30, args={"command": ["/bin/sh"]}), context)
    yield program
    assert program.stop() == 0, program.output


def open_terminal(
    program: TaskProgram, headers: dict[str, str] | None = None, path: str = "ws"
) -> ClientConnection:
    url = f"ws://127.0.0.1:{program.port}{program.prefix}{path}"
    secret = {"X-Det-Task-Secret": program.secret} if headers is None else headers
    return connect(url, additional_headers=secret, open_timeout=30)


def read_until(terminal: ClientConnection, pattern: str, seconds: float = 30) -> re.Match[str]:
    """The first match of ``pattern`` in the terminal's output (what was typed is echoed in it)."""
    seen = ""
    deadline = time.monotonic() + seconds
    while (found := re.search(pattern, seen)) is None:
        frame = terminal.recv(timeout=max(deadline - time.monotonic(), 0.01))
        assert isinstance(frame, bytes), f"a text frame before {pattern!r}: {frame!r} after {seen!r}"
        seen += frame.decode(errors="replace")
    return found


def exit_frame(terminal: ClientConnection) -> Any:
    """The first text frame (output before it is skipped); the connection closes after it."""
    while isinstance(frame := terminal.recv(timeout=30), bytes):
        pass
    return json.loads(frame)


def test_a_terminal_runs_what_is_typed_and_reports_the_exit(shell: TaskProgram) -> None:
    with open_terminal(shell) as terminal:
        terminal.send(b"echo hello-$((1+1))\n")
        read_until(terminal, "hello-2")
        terminal.send(b"exit\n")
        assert exit_frame(terminal) == {"exit": 0}


def test_the_exit_code_is_the_processes(shell: TaskProgram) -> None:
    with open_terminal(shell) as terminal:
        terminal.send(b"exit 7\n")
        assert exit_frame(terminal) == {"exit": 7}


def test_a_process_killed_by_a_signal_reports_128_plus_it(shell: TaskProgram) -> None:
    with open_terminal(shell) as terminal:
        terminal.send(b"kill -KILL $$\n")
        assert exit_frame(terminal) == {"exit": 128 + 9}


def test_a_resize_frame_sets_the_terminals_size(shell: TaskProgram) -> None:
    with open_terminal(shell) as terminal:
        terminal.send(json.dumps({"resize": [101, 33]}))
        terminal.send(b"stty size\n")
        read_until(terminal, "33 101")


def test_the_terminal_runs_in_the_working_directory_without_the_trial_token(shell: TaskProgram) -> None:
    with open_terminal(shell) as terminal:
        terminal.send(b'echo "dir=$(pwd) token=${DET_SESSION_TOKEN:-none} trial=$DET_TRIAL_ID."\n')
        found = read_until(terminal, r"dir=(.*) token=(.*) trial=(\d+)\.")
        assert found.groups()[:2] == (str(shell.output_file.parent / "context"), "none")


def test_each_connection_has_its_own_terminal(shell: TaskProgram) -> None:
    with open_terminal(shell) as first, open_terminal(shell) as second:
        first.send(b"printf 'PID-%s.' $$\n")
        second.send(b"printf 'PID-%s.' $$\n")
        assert read_until(first, r"PID-(\d+)\.")[1] != read_until(second, r"PID-(\d+)\.")[1]


@pytest.mark.parametrize(
    ("headers", "path", "status"),
    [
        ({}, "ws", 403),
        ({"X-Det-Task-Secret": "wrong-secret-wrong-secret"}, "ws", 403),
        (None, "elsewhere", 404),
    ],
)
def test_a_handshake_without_the_secret_or_off_the_path_is_refused(
    shell: TaskProgram, headers: dict[str, str] | None, path: str, status: int
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        open_terminal(shell, headers, path)
    assert refused.value.response.status_code == status


def test_the_ready_line_is_logged_and_the_secret_never_is(shell: TaskProgram) -> None:
    assert f"The shell is ready at {shell.prefix}ws" in shell.output
    assert shell.secret not in shell.output


def test_the_users_shell_runs_when_the_task_names_no_command(master: StandInMaster, tmp_path: Path) -> None:
    program = run_task("shell", master, task_answer("shell", 31, idle=60), tmp_path / "context")
    try:
        with open_terminal(program) as terminal:
            terminal.send(b"echo shell-$((2+3))\n")
            read_until(terminal, "shell-5")
    finally:
        assert program.stop() == 0, program.output


def test_an_idle_shell_waits_for_its_open_terminal_then_exits_0(
    master: StandInMaster, tmp_path: Path
) -> None:
    program = run_task(
        "shell", master, task_answer("shell", 32, args={"command": ["/bin/sh"]}, idle=1), tmp_path / "context"
    )
    with open_terminal(program) as terminal:
        time.sleep(2.5)
        terminal.send(b"echo still-$((1+1))\n")
        read_until(terminal, "still-2")
    assert program.wait(30) == 0, program.output


def test_a_bad_command_ends_with_one_line(master: StandInMaster, tmp_path: Path) -> None:
    trial_id = master.add(task_answer("shell", 33, args={"command": "ls -l"}))
    process = start_program("shell", master, trial_id, tmp_path)

    assert process.wait(60) == 1
    output = (tmp_path.parent / f"shell-{trial_id}.log").read_text().strip()
    assert output == "shell: the master's task answer: args.command: expected a list of strings, got 'ls -l'"


def test_a_connection_may_name_its_own_command(shell: TaskProgram) -> None:
    with open_terminal(shell, path="ws?command=sh&command=-c&command=echo+own-$((2*3));+exit+4") as terminal:
        read_until(terminal, "own-6")
        assert exit_frame(terminal) == {"exit": 4}


def test_in_a_pod_the_server_listens_at_the_pods_address_and_says_so(
    master: StandInMaster, tmp_path: Path
) -> None:
    # The Kubernetes runner gives a pod DET_POD_IP (status.podIP); the master answered loopback.
    answer = task_answer("shell", 34, args={"command": ["/bin/sh"]})
    program = run_task(
        "shell", master, {**answer, "bind_address": "192.0.2.1"}, tmp_path / "c", {"DET_POD_IP": "127.0.0.2"}
    )
    try:
        assert master.ready[max(master.ready)]["address"] == "127.0.0.2"
        with connect(
            f"ws://127.0.0.2:{program.port}{program.prefix}ws",
            additional_headers={"X-Det-Task-Secret": program.secret},
            open_timeout=30,
        ) as terminal:
            terminal.send(b"exit 0\n")
            assert exit_frame(terminal) == {"exit": 0}
    finally:
        program.stop()


def test_on_a_local_runner_the_program_tells_its_runner_and_not_the_master(
    master: StandInMaster, tmp_path: Path
) -> None:
    """The master asks a local or Docker task's program for no report of its own: the program writes
    its port into its work folder, and the runner finds that port held by the program's process."""
    from det_airflow.operators.runners._task_ready import check_own_port, read_ready_file

    workdir = tmp_path / "work"
    (workdir / ".det").mkdir(parents=True)
    config_file = workdir / ".det" / "experiment_config.json"
    answer = {**task_answer("shell", 35, args={"command": ["/bin/sh"]}), "ready_to": "runner"}
    trial_id = master.add(answer)
    process = start_program(
        "shell", master, trial_id, workdir, {"DET_EXPERIMENT_CONFIG_FILE": str(config_file)}
    )
    try:
        deadline = time.monotonic() + 60
        while (report := read_ready_file(workdir)) is None:
            assert process.poll() is None and time.monotonic() < deadline, (
                tmp_path / f"shell-{trial_id}.log"
            ).read_text()
            time.sleep(0.1)
        assert (workdir / ".det" / "task-ready.json").stat().st_mode & 0o777 == 0o600
        assert report.address == "127.0.0.1" and len(report.secret) >= 16
        check_own_port(report, {process.pid}, os.getuid())
        with connect(
            f"ws://127.0.0.1:{report.port}/det/proxy/35/ws",
            additional_headers={"X-Det-Task-Secret": report.secret},
            open_timeout=30,
        ) as terminal:
            terminal.send(b"exit 0\n")
            assert exit_frame(terminal) == {"exit": 0}
        assert trial_id not in master.ready  # nothing was said to the master
    finally:
        process.terminate()
        process.wait(30)
