"""One API server process of the deployment runs the background jobs at their intervals: on SQLite,
the holder of a file lock beside the database, let go when the holder dies."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from det_airflow.master import housekeeping, leadership
from det_airflow.master.db import Database

WAIT_SECONDS = 30.0


def test_one_process_leads_and_its_death_lets_another_lead(tmp_path: Path) -> None:
    database = tmp_path / "airflow.db"
    first = leadership.of(create_engine(f"sqlite:///{database}"))
    second = leadership.of(create_engine(f"sqlite:///{database}"))
    assert isinstance(first, leadership.FileLock)
    assert first.holds() and first.holds()
    assert not second.holds()
    first.release()
    assert second.holds()
    second.release()

    # Another process leads until it is killed.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(database) + leadership.LOCK_SUFFIX!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not first.holds()
    finally:
        holder.kill()
        holder.wait()
    assert first.holds()
    first.release()


def test_sqlite_in_memory_leads_in_every_process() -> None:
    assert isinstance(leadership.of(create_engine("sqlite://")), leadership.Always)


def test_a_process_that_does_not_lead_runs_only_the_jobs_asked_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "airflow.db"
    ran: list[str] = []
    changed = threading.Condition()

    def job(name: str) -> housekeeping.Job:
        def run(_db: Database) -> None:
            with changed:
                ran.append(name)
                changed.notify_all()

        return housekeeping.Job(name, 0.2, run)

    def wait_for(count: int, name: str) -> None:
        with changed:
            assert changed.wait_for(lambda: ran.count(name) >= count, WAIT_SECONDS), ran

    monkeypatch.setattr(housekeeping, "JOBS", (job("often"), job("asked")))
    monkeypatch.setattr(housekeeping, "get_database", lambda: Database(f"sqlite:///{database}"))
    other = leadership.FileLock(f"{database}{leadership.LOCK_SUFFIX}")  # another API server process
    assert other.holds()
    housekeeping.start()
    try:
        time.sleep(1.0)  # five intervals: the leader runs them, not this process
        assert ran == []
        housekeeping.run_soon("asked")  # a request of this process asks for it
        wait_for(1, "asked")
        assert "often" not in ran
        other.release()  # the leader stopped: this process takes over
        wait_for(3, "often")
    finally:
        housekeeping.stop()
        other.release()
