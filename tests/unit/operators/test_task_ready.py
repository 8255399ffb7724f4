"""A local task's server as its runner reports it: only a port the task's own process listens on.

The task's program (its owner's code) writes where its server listens into its work folder; the
runner reads ``/proc`` to check that the listening socket is held by the task's processes and
belongs to its uid before it tells the master. Real processes and sockets on loopback here.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from det_airflow import settings
from det_airflow.errors import APIError
from det_airflow.operators.runners import TrialLaunch
from det_airflow.operators.runners._task_ready import (
    NotTheTasksPort,
    OnTaskReady,
    ReadyReport,
    ReadyWatch,
    check_own_port,
    read_ready_file,
)
from det_airflow.operators.runners.local import LocalRunner
from det_airflow.tasks import READY_FILE
from det_airflow.tasks._server import write_ready_file
from det_airflow.trial_process import TRIAL_FILES_DIR
from tests.unit.master.creating import tar_gz

SECRET = "s" * 32
# A task's program: listens on a port of its own, then says a port is its server's: its own, or
# the one CLAIM names (another user's server, a service of the platform's).
PROGRAM = b"""\
import os, socket, time
from det_airflow.tasks._server import write_ready_file

server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
port = server.getsockname()[1]
claim = int(os.environ.get("CLAIM") or port)
write_ready_file(os.path.dirname(os.environ["DET_EXPERIMENT_CONFIG_FILE"]), claim, "%s", "127.0.0.1")
print("listening on", port, "says", claim, flush=True)
time.sleep(120)
""" % SECRET.encode()


@pytest.fixture(autouse=True)
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner as a worker that is not root: the task runs as the worker's own user (no OS user
    is made); its uid is still checked against the socket's."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.fixture
def other_server() -> Iterator[int]:
    """A server of someone else's on loopback (this test process stands for it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def run_task(
    tmp_path: Path, claim: int | None = None
) -> tuple[list[tuple[int, str, str]], list[str], list[str]]:
    """Run PROGRAM as a notebook task's trial through the local runner until its runner reported it
    or said why not; answers the reports, the trial's error lines and all its lines."""
    reports: list[tuple[int, str, str]] = []
    spec = {
        "trial_id": 7,
        "experiment_id": 3,
        "run_id": 1,
        "config": {
            "entrypoint": f"{sys.executable} program.py",
            "labels": ["det-task:notebook"],
            "environment": {"environment_variables": {"cpu": [f"CLAIM={claim or ''}"]}},
        },
    }
    trial = TrialLaunch.from_answer(
        spec,
        token="trial-token",
        master_url="http://127.0.0.1:9",
        workdir=tmp_path / "work" / "trial_7",
        fetch_context=lambda: tar_gz({"program.py": PROGRAM}),
    )
    told = OnTaskReady(ready=lambda *report: reports.append(report), gone=lambda port: None)
    trial = dataclasses.replace(trial, on_task_ready=told)
    lines: list[tuple[str, str]] = []
    stop = threading.Event()
    runner = LocalRunner(settings.load({}))
    thread = threading.Thread(
        target=runner.run_trial,
        args=(trial,),
        kwargs={"on_output": lambda *line: lines.append(line), "stop": stop},
    )
    thread.start()
    deadline = time.monotonic() + 60
    try:
        while not reports and not any(line.startswith("ERROR") for line, _ in lines):
            assert time.monotonic() < deadline, lines
            assert thread.is_alive(), lines
            time.sleep(0.05)
        time.sleep(0.5)  # a second report, or a report after a refusal, would come now
    finally:
        stop.set()
        thread.join(timeout=30)
    return reports, [line for line, _ in lines if line.startswith("ERROR")], [line for line, _ in lines]


def test_the_runner_reports_a_port_the_tasks_own_process_listens_on(tmp_path: Path) -> None:
    reports, errors, said = run_task(tmp_path)
    assert errors == []
    ((port, secret, address),) = reports
    assert (secret, address) == (SECRET, "127.0.0.1")
    assert f"listening on {port} says {port}" in said  # the port its own server listened on


def test_a_port_another_process_listens_on_is_never_reported(tmp_path: Path, other_server: int) -> None:
    reports, errors, _ = run_task(tmp_path, claim=other_server)
    assert reports == []
    assert errors == [
        "ERROR: the task's server is not reported to the master: the server listening at "
        f"127.0.0.1:{other_server} is not one of the task's own processes"
    ]


def test_a_port_nothing_listens_on_is_never_reported(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    reports, errors, _ = run_task(tmp_path, claim=free)
    assert reports == []
    assert errors == [
        f"ERROR: the task's server is not reported to the master: nothing listens at 127.0.0.1:{free}"
    ]


@pytest.mark.skipif(os.getuid() != 0, reason="starts a server as another uid: needs root")
def test_a_server_of_another_uid_is_not_the_tasks(tmp_path: Path) -> None:
    """The task's own process holds the socket, but the socket belongs to another uid than the one
    the task runs as."""
    listener = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True); time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        user=65534,
        group=65534,
        start_new_session=True,
    )
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        report = ReadyReport(port, SECRET, "127.0.0.1")
        check_own_port(report, {listener.pid}, 65534)  # its own: passes
        with pytest.raises(NotTheTasksPort, match="belongs to uid 65534, not the task's"):
            check_own_port(report, {listener.pid}, 61184)
        with subprocess.Popen(["sleep", "60"], user=65534, group=65534, start_new_session=True) as task:
            try:
                with pytest.raises(NotTheTasksPort, match="not one of the task's own processes"):
                    check_own_port(report, {task.pid}, 65534)  # the same uid, another process
            finally:
                task.kill()
    finally:
        listener.kill()
        listener.wait()


def test_the_ready_file_is_read_without_following_links(tmp_path: Path) -> None:
    """The trial owns its work folder: a link where the file (or det's folder) should be is refused,
    so the root runner never reads a file of the platform's for it."""
    workdir = tmp_path / "work"
    files = workdir / ".det"
    files.mkdir(parents=True)
    assert read_ready_file(workdir) is None
    (files / READY_FILE).symlink_to("/etc/passwd")
    with pytest.raises(NotTheTasksPort, match="cannot read"):
        read_ready_file(workdir)
    (files / READY_FILE).unlink()
    (files / READY_FILE).write_text('{"port": 70000, "secret": "x", "address": "127.0.0.1"}')
    with pytest.raises(NotTheTasksPort, match="port: expected 1-65535"):
        read_ready_file(workdir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / READY_FILE).write_text('{"port": 80, "secret": "x", "address": "127.0.0.1"}')
    files.rename(tmp_path / "moved")
    files.symlink_to(elsewhere)
    with pytest.raises(NotTheTasksPort, match="cannot read"):
        read_ready_file(workdir)


# --- the watch, on this test process's own sockets --------------------------------------------------


def watch(
    tmp_path: Path, report: Callable[[int, str, str], None], gone: Callable[[int], None] = lambda port: None
) -> tuple[ReadyWatch, Path, list[str]]:
    """A watch of ``tmp_path`` for a task whose process is this test's (its sockets are the task's)."""
    folder = tmp_path / TRIAL_FILES_DIR
    folder.mkdir()
    lines: list[str] = []
    on_output = lambda line, _stream: lines.append(line)  # noqa: E731
    return (
        ReadyWatch(
            tmp_path,
            uid=None,
            leaders=lambda: {os.getpid()},
            report=OnTaskReady(ready=report, gone=gone),
            on_output=on_output,
        ),
        folder,
        lines,
    )


def wait_for(condition: Callable[[], object], lines: list[str], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)


def test_a_report_written_before_its_server_listens_is_reported_once_it_listens(tmp_path: Path) -> None:
    reports: list[tuple[int, str, str]] = []
    ready, folder, lines = watch(tmp_path, lambda *report: reports.append(report))
    with socket.socket() as server, ready:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        write_ready_file(str(folder), port, SECRET, "127.0.0.1")
        wait_for(lambda: lines, lines)  # refused: nothing listens yet
        server.listen()
        wait_for(lambda: reports, lines)
    assert reports == [(port, SECRET, "127.0.0.1")]
    assert lines == [
        f"ERROR: the task's server is not reported to the master: nothing listens at 127.0.0.1:{port}"
    ]


def test_a_master_that_does_not_answer_is_told_again_and_one_that_refuses_is_not(tmp_path: Path) -> None:
    tries: list[int] = []

    def unreachable_once(port: int, _secret: str, _address: str) -> None:
        tries.append(port)
        if len(tries) == 1:
            raise APIError("cannot reach the master at http://127.0.0.1:9: connection refused")

    ready, folder, lines = watch(tmp_path, unreachable_once)
    with socket.socket() as server, ready:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        write_ready_file(str(folder), port, SECRET, "127.0.0.1")
        wait_for(lambda: len(tries) == 2, lines)
        time.sleep(1.5)  # told, so told no more
    assert tries == [port, port]
    assert lines == [
        "WARNING: could not tell the master where the task's server listens (cannot reach the master at "
        "http://127.0.0.1:9: connection refused); trying again in 1 s"
    ]

    refusals: list[int] = []

    def refuses(port: int, _secret: str, _address: str) -> None:
        refusals.append(port)
        raise APIError("trial 7 is not a task", status_code=409)

    (tmp_path / "again").mkdir()
    ready, folder, lines = watch(tmp_path / "again", refuses)
    with socket.socket() as server, ready:
        server.bind(("127.0.0.1", 0))
        server.listen()
        write_ready_file(str(folder), server.getsockname()[1], SECRET, "127.0.0.1")
        wait_for(lambda: lines, lines)
        time.sleep(1.5)
    assert len(refusals) == 1
    assert lines == ["ERROR: the master refused the task's server: trial 7 is not a task"]


def test_a_reported_port_its_server_gives_up_is_withdrawn_and_reported_again_once_it_listens_again(
    tmp_path: Path,
) -> None:
    """A task's server that stops listening (and whose port someone else's program may take) is
    withdrawn from the master within a couple of seconds; the same port held by the task again is
    reported again."""
    events: list[tuple[str, int]] = []
    ready, folder, lines = watch(
        tmp_path, lambda port, *_: events.append(("ready", port)), lambda port: events.append(("gone", port))
    )
    with ready:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        write_ready_file(str(folder), port, SECRET, "127.0.0.1")
        wait_for(lambda: events == [("ready", port)], lines)
        server.close()
        wait_for(lambda: events == [("ready", port), ("gone", port)], lines)
        assert lines == [
            f"ERROR: the task's server is no longer reported to the master: nothing listens at 127.0.0.1:{port}"
        ]
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))
            again.listen()
            wait_for(lambda: len(events) == 3, lines)
            time.sleep(1.5)  # still held: told no more
    assert events == [("ready", port), ("gone", port), ("ready", port)]


def test_a_new_report_withdraws_the_old_port_first(tmp_path: Path) -> None:
    events: list[tuple[str, int]] = []
    ready, folder, lines = watch(
        tmp_path, lambda port, *_: events.append(("ready", port)), lambda port: events.append(("gone", port))
    )
    with socket.socket() as first, socket.socket() as second, ready:
        ports = []
        for server in (first, second):
            server.bind(("127.0.0.1", 0))
            server.listen()
            ports.append(server.getsockname()[1])
        write_ready_file(str(folder), ports[0], SECRET, "127.0.0.1")
        wait_for(lambda: len(events) == 1, lines)
        write_ready_file(str(folder), ports[1], SECRET, "127.0.0.1")
        wait_for(lambda: len(events) == 3, lines)
    assert events == [("ready", ports[0]), ("gone", ports[0]), ("ready", ports[1])]
