"""``core_v2.init(unmanaged=True)`` with ``DET_MASTER`` set: the run becomes an unmanaged experiment
(the ``master`` fixture: see conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import select

from det_airflow.api.user import store_login
from det_airflow.errors import APIError, DetError
from det_airflow.experimental import core_v2
from det_airflow.master import schema
from det_airflow.master.db import Database

from ._stored import experiments as _experiments
from ._stored import logs as _logs
from ._stored import trials as _trials


def test_a_run_with_a_login_reports_to_the_master_and_completes(master: tuple[str, Database]) -> None:
    url, db = master
    store_login(url, "alice", "alice-token")
    core_v2.init(defaults=core_v2.DefaultConfig(name="unmanaged-mnist", hparams={"lr": 0.1}))
    try:
        assert core_v2.info is not None and core_v2.info.trial.hparams == {"lr": 0.1}
        assert _experiments(db) == [("alice", "ACTIVE", None, None)]
        for step in (1, 2):
            core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        core_v2.train.report_validation_metrics(steps_completed=2, metrics={"loss": 0.4})
        with core_v2.checkpoint.store_path({"steps_completed": 2}) as (path, uuid):
            (path / "weights").write_text("w")
        assert core_v2.preempt.should_preempt() is False
    finally:
        core_v2.close()
    assert _experiments(db) == [("alice", "COMPLETED", None, None)]
    assert _trials(db) == [("COMPLETED", {"lr": 0.1}, 2, uuid)]
    with db.read() as conn:
        stored = conn.execute(select(schema.checkpoints.c.storage)).scalar_one()
    assert (Path(stored["path"]) / "weights").read_text() == "w"


def test_a_program_that_raises_ends_its_experiment_in_error(
    master: tuple[str, Database], tmp_path: Path
) -> None:
    url, db = master
    store_login(url, "alice", "alice-token")
    program = tmp_path / "train.py"
    program.write_text(
        textwrap.dedent(
            """
            from det_airflow.experimental import core_v2

            core_v2.init(defaults=core_v2.DefaultConfig(name="diverges", hparams={"lr": 10.0}))
            core_v2.train.report_training_metrics(steps_completed=1, metrics={"loss": 3.0})
            print("step 1: loss 3.0", end="")  # no newline yet: still shipped
            raise ValueError("loss became NaN")
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 1
    assert "ValueError: loss became NaN" in result.stderr  # the traceback is still printed
    assert _experiments(db) == [("alice", "ERROR", None, "ValueError: loss became NaN")]
    assert _trials(db) == [("ERROR", {"lr": 10.0}, 1, None)]
    # What the program printed, its traceback included, is in the trial's logs (`det trial logs`).
    logs = _logs(db)
    assert ("stdout", "step 1: loss 3.0") in logs
    assert ("stderr", "ValueError: loss became NaN") in logs
    assert ("stderr", "Traceback (most recent call last):") in logs


def test_what_a_run_prints_goes_to_its_trial_logs_and_the_streams_come_back(
    master: tuple[str, Database],
) -> None:
    url, db = master
    store_login(url, "alice", "alice-token")
    stdout, stderr = sys.stdout, sys.stderr
    core_v2.init(defaults=core_v2.DefaultConfig(name="printing"))
    try:
        print("epoch 1: accuracy 0.91")
        print("WARNING: learning rate is high", file=sys.stderr)
    finally:
        core_v2.close()
    assert (sys.stdout, sys.stderr) == (stdout, stderr)
    logs = _logs(db)
    assert ("stdout", "epoch 1: accuracy 0.91") in logs
    assert ("stderr", "learning rate is high") in logs  # its level became the record's
    with db.read() as conn:
        levels = dict(conn.execute(select(schema.trial_logs.c.message, schema.trial_logs.c.level)).all())
    assert levels["learning rate is high"] == "WARNING"


def test_without_a_login_init_says_how_to_log_in_and_stores_nothing(master: tuple[str, Database]) -> None:
    url, db = master
    with pytest.raises(APIError, match=r"not logged in to .*: run `det user login`"):
        core_v2.init(defaults=core_v2.DefaultConfig(name="anonymous"))
    assert _experiments(db) == []
    core_v2.close()  # nothing was started: closing is harmless


def test_a_user_who_may_not_create_runs_is_refused(master: tuple[str, Database]) -> None:
    url, db = master
    store_login(url, "viewer", "viewer-token")
    with pytest.raises(APIError, match="may not create experiments: needs the right to create DAG runs"):
        core_v2.init(defaults=core_v2.DefaultConfig(name="not-mine"))
    assert _experiments(db) == []


def test_killing_the_experiment_reaches_the_program(master: tuple[str, Database]) -> None:
    url, db = master
    store_login(url, "alice", "alice-token")
    core_v2.init(defaults=core_v2.DefaultConfig(name="long-run"))
    try:
        assert core_v2.info is not None
        from det_airflow.master import experiment_state

        with db.begin() as conn:
            experiment_state.change_state(conn, core_v2.info.trial.experiment_id, "kill")
        assert core_v2.preempt.should_preempt() is True
    finally:
        core_v2.close()
    assert _experiments(db) == [("alice", "CANCELED", None, None)]


def test_a_managed_init_outside_a_trial_is_refused(master: tuple[str, Database]) -> None:
    url, db = master
    with pytest.raises(DetError, match=r"unmanaged=False\) runs only inside a trial"):
        core_v2.init(defaults=core_v2.DefaultConfig(name="managed"), unmanaged=False)
    assert _experiments(db) == []
