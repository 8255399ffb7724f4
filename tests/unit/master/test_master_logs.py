"""The master's own log (`det master logs`): each API server process keeps its ``det_airflow``
records in a bounded file of its own; admins read them merged by time, and nobody else reads them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from det_airflow.master import housekeeping, master_logs
from det_airflow.master.app import create_app
from tests.unit.master.people_app import People

log = logging.getLogger("det_airflow.master.test_master_logs")


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process keeps its records as an API server process does, in Airflow's log folder."""
    monkeypatch.setenv("AIRFLOW__LOGGING__BASE_LOG_FOLDER", str(tmp_path / "logs"))
    where = master_logs.log_folder()
    assert where == tmp_path / "logs" / "det-master"
    master_logs.install(where)
    yield where
    master_logs.uninstall()


def _entries(people: People, user: str = "admin", **params: object) -> list[dict]:
    answer = people.call(user, "GET", "/master/logs", params=params)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["entries"])


def test_admins_read_the_masters_own_records_and_only_those(people: People, folder: Path) -> None:
    log.warning("experiment %d: %s", 7, "the trial's pod did not start")
    log.debug("too fine to keep")
    logging.getLogger("airflow.somewhere").warning("Airflow's own record, not the master's")
    entries = _entries(people)
    mine = [e for e in entries if e["logger"] == log.name]
    assert [(e["level"], e["message"]) for e in mine] == [
        ("WARNING", "experiment 7: the trial's pod did not start")
    ]
    assert all(e["logger"].startswith("det_airflow") for e in entries)
    assert mine[0]["time"].endswith("Z") and mine[0]["process"].endswith(f":{os.getpid()}")
    assert [p.stat().st_mode & 0o777 for p in folder.iterdir()] == [0o600]
    assert folder.stat().st_mode & 0o777 == 0o700


def test_others_are_refused_with_a_clear_line(people: People, folder: Path) -> None:
    log.warning("a path only admins should see: /srv/secret")
    for user in ("alice", "viewer"):
        answer = people.call(user, "GET", "/master/logs")
        assert answer.status_code == 403
        assert answer.json()["detail"] == f"user '{user}' may not read the master's logs: only admins may"
    assert people.call(None, "GET", "/master/logs").status_code == 401


def test_records_of_every_process_are_merged_by_time(people: People, folder: Path) -> None:
    log.warning("first, here")
    # Another API server process of this machine: a real one, writing its own file in the folder.
    other = textwrap.dedent(
        f"""
        import logging, sys
        from pathlib import Path
        from det_airflow.master import master_logs
        master_logs.install(Path({str(folder)!r}))
        logging.getLogger("det_airflow.master.other").warning("second, in another process")
        """
    )
    time.sleep(0.01)
    subprocess.run([sys.executable, "-c", other], check=True, timeout=120)
    time.sleep(0.01)
    log.warning("third, here")
    entries = [e for e in _entries(people) if e["message"].split(",")[0] in ("first", "second", "third")]
    assert [e["message"] for e in entries] == ["first, here", "second, in another process", "third, here"]
    assert entries[0]["process"] == entries[2]["process"] != entries[1]["process"]
    assert len(list(folder.glob("*.jsonl"))) == 2

    # Other threads of this process may log after the third record: only its place is asserted.
    last = _entries(people, tail=1)
    assert len(last) == 1 and last[0]["time"] >= entries[2]["time"]
    since = datetime.fromisoformat(entries[2]["time"]).timestamp()
    after = _entries(people, since=since)
    assert [e["message"] for e in after if e["logger"] == log.name] == ["third, here"]
    assert all(e["time"] >= entries[2]["time"] for e in after)
    assert people.call("admin", "GET", "/master/logs", params={"tail": -1}).status_code == 422


def test_user_text_stays_one_record_and_a_long_one_is_cut(people: People, folder: Path) -> None:
    forged = "name\n2026-01-01T00:00:00Z [ERROR]: forged record"
    log.warning("experiment named %s", forged)
    log.warning("x" * (master_logs.MAX_MESSAGE + 500))
    entries = [e for e in _entries(people) if e["logger"] == log.name]
    assert [e["message"] for e in entries][0] == f"experiment named {forged}"
    assert entries[1]["message"] == "x" * master_logs.MAX_MESSAGE + " ... [500 characters cut]"
    assert len(entries) == 2


def test_files_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "det-master"
    folder.mkdir()
    for pid in range(30):  # files of processes long gone
        (folder / f"old-{pid}.jsonl").write_text("{}\n")
    monkeypatch.setattr(master_logs, "MAX_FILE_BYTES", 4096)
    own = master_logs.install(folder)
    try:
        assert own is not None
        for i in range(400):
            log.warning("record %d %s", i, "y" * 100)
    finally:
        master_logs.uninstall()
    stems = {p.name.split(".jsonl")[0] for p in folder.iterdir()}
    assert len(stems) == master_logs.MAX_PROCESSES and own.name.split(".jsonl")[0] in stems
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(own.stem)) == [
        own.name,
        own.name + ".1",
    ]
    assert all(p.stat().st_size <= 4096 + 300 for p in folder.iterdir())
    kept = master_logs.read(folder)
    assert kept[-1].message.startswith("record 399 ") and len(kept) < 400
    log.warning("after uninstall")
    assert master_logs.read(folder)[-1].message.startswith("record 399 ")


def test_the_api_server_process_keeps_its_records_while_the_master_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.api_fastapi.app import lifespan

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    monkeypatch.setenv("AIRFLOW__LOGGING__BASE_LOG_FOLDER", str(tmp_path / "logs"))
    monkeypatch.setattr(housekeeping, "JOBS", (housekeeping.Job("nothing", 3600.0, lambda _db: None),))
    api_server = FastAPI(lifespan=lifespan)
    api_server.mount("/det", create_app())
    with TestClient(api_server):
        log.warning("while serving")
    log.warning("after it stopped")
    messages = [r.message for r in master_logs.read(tmp_path / "logs" / "det-master")]
    assert "while serving" in messages and "after it stopped" not in messages
