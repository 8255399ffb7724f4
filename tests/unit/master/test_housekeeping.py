"""The master's background jobs: run by one thread while the master app serves, each failure logged
under the job's name and never passed on."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from det_airflow.master import housekeeping
from det_airflow.master.app import create_app
from det_airflow.master.db import Database

WAIT_SECONDS = 30.0


def _failing(message: str) -> Callable[[Database], object]:
    def run(_db: Database) -> object:
        raise RuntimeError(message)

    return run


def _housekeeping_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "det-housekeeping"]


def test_the_master_mounted_in_airflows_api_server_runs_its_jobs_while_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow's API server app and its lifespan, which enters the lifespans of mounted plugin apps.
    from airflow.api_fastapi.app import lifespan

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    calls: list[str] = []
    ran_after_a_failure = threading.Event()

    def fails_once(_db: Database) -> None:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise RuntimeError("the database is away")
        ran_after_a_failure.set()

    monkeypatch.setattr(housekeeping, "JOBS", (housekeeping.Job("flaky", 0.01, fails_once),))
    api_server = FastAPI(lifespan=lifespan)
    api_server.mount("/det", create_app())

    with TestClient(api_server):
        assert ran_after_a_failure.wait(WAIT_SECONDS), "the job did not run again after it failed"
        assert len(_housekeeping_threads()) == 1

    assert set(calls) == {"det-housekeeping"}
    assert _housekeeping_threads() == []  # stopped with the app


def test_a_failing_job_is_logged_under_its_name_and_the_jobs_after_it_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(
        housekeeping,
        "JOBS",
        (
            housekeeping.Job("retire things", 30.0, _failing("disk full")),
            housekeeping.Job("count things", 30.0, lambda _db: ran.append("count things")),
        ),
    )
    db = Database(f"sqlite:///{tmp_path / 'det.db'}")

    with caplog.at_level(logging.WARNING, logger=housekeeping.__name__):
        assert housekeeping.run_once(db) is False
        assert housekeeping.run_once(db) is False

    assert ran == ["count things", "count things"]
    first, again = caplog.records
    assert first.getMessage() == "housekeeping job 'retire things' failed; it runs again in 30.0 s"
    assert first.exc_info is not None and str(first.exc_info[1]) == "disk full"
    # The same failure again is one line, not another traceback.
    assert again.getMessage() == "housekeeping job 'retire things' failed again: RuntimeError: disk full"
    assert again.exc_info is None


def test_a_job_is_run_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    monkeypatch.setattr(
        housekeeping,
        "JOBS",
        (
            housekeeping.Job("one", 5.0, lambda _db: ran.append("one")),
            housekeeping.Job("two", 5.0, _failing("no")),
        ),
    )
    db = Database(f"sqlite:///{tmp_path / 'det.db'}")

    assert housekeeping.run_job("one", db) is True
    assert housekeeping.run_job("two", db) is False
    assert ran == ["one"]


def test_a_trials_exit_asks_for_a_job_that_exists() -> None:
    from det_airflow.master import routes_internal

    assert routes_internal.WAITING_SLOTS in {job.name for job in housekeeping.JOBS}


def test_a_job_asked_for_at_later_moments_runs_at_each_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot told to move asks for a few quick looks: each runs, well before the job's interval."""
    ran: list[float] = []
    looked_three_times = threading.Event()

    def look(_db: Database) -> None:
        ran.append(time.monotonic())
        if len(ran) == 4:  # its first turn, then the three asked for
            looked_three_times.set()

    monkeypatch.setattr(housekeeping, "JOBS", (housekeeping.Job("look", 3600.0, look),))
    monkeypatch.setattr(housekeeping, "get_database", lambda: Database(f"sqlite:///{tmp_path / 'db'}"))
    housekeeping.start()
    try:
        assert not looked_three_times.wait(0.2)
        asked = time.monotonic()
        housekeeping.run_soon("look", 0.2, 0.4, 0.6)
        assert looked_three_times.wait(WAIT_SECONDS), f"ran {len(ran)} times"
    finally:
        housekeeping.stop()
    assert all(later - asked >= delay - 0.01 for later, delay in zip(ran[1:], (0.2, 0.4, 0.6), strict=True))
