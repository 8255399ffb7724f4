"""`det master logs [-f] [--tail N]` against the master's own route (the people app on SQLite, served
on loopback), whose process keeps its records as an API server process does."""

from __future__ import annotations

import logging
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det_airflow.master import master_logs
from tests.unit.cli.test_task_verbs import Cluster, _det_script, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here

log = logging.getLogger("det_airflow.master.test_master_logs_verb")
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


@pytest.fixture
def kept(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("AIRFLOW__LOGGING__BASE_LOG_FOLDER", str(tmp_path / "logs"))
    folder = master_logs.log_folder()
    master_logs.install(folder)
    yield folder
    master_logs.uninstall()


def test_admins_see_determineds_layout_with_user_text_kept_inert(
    det: Any, cluster: Cluster, kept: Path
) -> None:
    # A name a user chose: a terminal control (OSC 52, write the clipboard) and a line made to look
    # like a record of its own.
    log.warning("experiment %s stopped", "a\x1b]52;c;cGF3bmVk\x07name\n2026-01-01T00:00:00Z [ERROR]: forged")
    log.error("second record")
    cluster.login("admin")
    shown = det("master", "logs")
    assert shown.code == 0, shown.err
    start = shown.out.index("[WARNING]: experiment")
    lines = shown.out[shown.out.rfind("\n", 0, start) + 1 :].splitlines()
    assert re.fullmatch(TIME, lines[0].split(" ", 1)[0])
    assert lines[0].split(" ", 1)[1] == "[WARNING]: experiment aname"
    assert lines[1] == "    2026-01-01T00:00:00Z [ERROR]: forged stopped"
    assert re.fullmatch(TIME, lines[2].split(" ", 1)[0])
    assert lines[2].split(" ", 1)[1] == "[ERROR]: second record"
    assert "\x1b" not in shown.out and "\x07" not in shown.out

    # The last record: the second one, or one another thread of this process logged after it.
    last = det("master", "logs", "--tail", "1").out.splitlines()
    assert len(last) == 1 and last[0].split(" ", 1)[0] >= lines[2].split(" ", 1)[0]


def test_others_get_one_clear_line_and_bad_tails_are_usage_errors(
    det: Any, cluster: Cluster, kept: Path
) -> None:
    log.warning("for admins only")
    refused = det("master", "logs")
    assert (refused.code, refused.out) == (1, "")
    assert (
        refused.err
        == "Error: permission denied: user 'alice' may not read the master's logs: only admins may\n"
    )
    for bad in ("-1", "ten"):
        usage = det("master", "logs", "--tail", bad)
        assert usage.code == 2 and "a number of lines, 0 or more" in usage.err


def test_follow_prints_new_records_once_as_they_come(cluster: Cluster, kept: Path) -> None:
    log.warning("before following")
    cluster.login("admin")
    follower = subprocess.Popen(
        [_det_script(), "master", "logs", "-f", "--tail", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    lines: queue.Queue[str] = queue.Queue()
    assert follower.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout], daemon=True).start()

    ours = ("before following", "while following", "and after")

    def next_line() -> str:
        """The next line of this test's records (other threads of this process may log too)."""
        while True:
            try:
                line = lines.get(timeout=60).split(" ", 1)[1]
            except queue.Empty:
                pytest.fail(f"det master logs -f printed nothing more; stderr: {follower.stderr}")
            if line.endswith(ours, 0, -1):
                return line

    try:
        assert next_line() == "[WARNING]: before following\n"
        log.warning("while following")
        assert next_line() == "[WARNING]: while following\n"
        time.sleep(2.5)  # more than two polls: a record shown is not shown again
        log.warning("and after")
        assert next_line() == "[WARNING]: and after\n"
    finally:
        follower.kill()
        follower.wait(timeout=30)
