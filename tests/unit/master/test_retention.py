"""Log retention: the master's housekeeping deletes the log lines of trials that ended more than
their experiment's ``retention_policy.log_retention_days`` ago, else ``[det] log_retention_days``
ago; -1, the default, keeps them forever (master on SQLite)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, update

from det_airflow import settings
from det_airflow.config import config_to_dict, parse_config
from det_airflow.master import housekeeping, lifecycle, schema, trial_logs
from det_airflow.master.db import Database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'det.db'}")
    database.migrate()
    yield database
    database.engine.dispose()


def experiment(db: Database, **top: Any) -> int:
    """An experiment stored as the master stores a submitted one: its config normalized."""
    config = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}, **top}
    with db.begin() as conn:
        return int(
            conn.execute(
                insert(schema.experiments).values(
                    name="logs", owner="alice", labels=[], state="ACTIVE",
                    config=config_to_dict(parse_config(config)), config_yaml="",
                    resource_pool="default_pool", searcher_name="single", search_done=False,
                    progress=0.0, start_time=lifecycle.now(), archived=False,
                ).returning(schema.experiments.c.id)
            ).scalar_one()
        )  # fmt: skip


def trial(db: Database, e: int, *, ended_days_ago: float | None, state: str = "COMPLETED") -> int:
    """A trial with two log lines; ``ended_days_ago=None``: it has not ended."""
    with db.begin() as conn:
        request = 1 + len(
            conn.execute(schema.trials.select().where(schema.trials.c.experiment_id == e)).all()
        )
        t = int(
            conn.execute(
                insert(schema.trials)
                .values(
                    experiment_id=e, request_id=request, state=state, hparams={}, trial_seed=1, summary={}
                )
                .returning(schema.trials.c.id)
            ).scalar_one()
        )
        if ended_days_ago is not None:
            end = lifecycle.now() - timedelta(days=ended_days_ago)
            conn.execute(update(schema.trials).where(schema.trials.c.id == t).values(end_time=end))
        trial_logs.append_logs(conn, t, [{"message": "epoch 1"}, {"message": "epoch 2"}])
    return t


def logs(db: Database, t: int) -> list[str]:
    with db.read() as conn:
        return [r.message for r in trial_logs.read_logs(conn, t, after=None, limit=None, tail=None)]


def run_retention(db: Database) -> None:
    assert housekeeping.run_job(housekeeping.DELETE_EXPIRED_LOGS, db)


def test_only_the_trials_that_ended_before_the_retention_days_lose_their_logs(db: Database) -> None:
    e = experiment(db, retention_policy={"log_retention_days": 7})
    old = trial(db, e, ended_days_ago=8)
    old_error = trial(db, e, ended_days_ago=30, state="ERROR")
    recent = trial(db, e, ended_days_ago=6)
    running = trial(db, e, ended_days_ago=None, state="RUNNING")

    run_retention(db)

    assert logs(db, old) == logs(db, old_error) == []
    assert logs(db, recent) == logs(db, running) == ["epoch 1", "epoch 2"]


def test_a_trial_that_was_restarted_keeps_the_logs_of_its_earlier_end(db: Database) -> None:
    e = experiment(db, retention_policy={"log_retention_days": 1})
    restarted = trial(db, e, ended_days_ago=5, state="RUNNING")  # ended once; running again

    run_retention(db)

    assert logs(db, restarted) == ["epoch 1", "epoch 2"]


def test_zero_days_deletes_the_logs_of_any_ended_trial(db: Database) -> None:
    e = experiment(db, retention_policy={"log_retention_days": 0})
    ended = trial(db, e, ended_days_ago=0.01)

    run_retention(db)

    assert logs(db, ended) == []


def test_an_experiment_without_a_retention_policy_keeps_its_logs(db: Database) -> None:
    kept = trial(db, experiment(db), ended_days_ago=400)
    forever = trial(db, experiment(db, retention_policy={"log_retention_days": -1}), ended_days_ago=400)
    expiring = trial(db, experiment(db, retention_policy={"log_retention_days": 10}), ended_days_ago=400)

    run_retention(db)

    assert logs(db, kept) == logs(db, forever) == ["epoch 1", "epoch 2"]
    assert logs(db, expiring) == []


def test_the_clusters_default_applies_where_the_experiment_sets_none(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__LOG_RETENTION_DAYS", "30")
    defaulted = trial(db, experiment(db), ended_days_ago=31)
    within = trial(db, experiment(db), ended_days_ago=29)
    forever = trial(db, experiment(db, retention_policy={"log_retention_days": -1}), ended_days_ago=31)
    longer = trial(db, experiment(db, retention_policy={"log_retention_days": 60}), ended_days_ago=31)

    run_retention(db)

    assert logs(db, defaulted) == []
    assert logs(db, within) == logs(db, forever) == logs(db, longer) == ["epoch 1", "epoch 2"]


def test_a_config_stored_before_retention_policy_existed_takes_the_default(db: Database) -> None:
    e = experiment(db)
    with db.begin() as conn:
        stored = conn.execute(schema.experiments.select().where(schema.experiments.c.id == e)).one().config
        stored.pop("retention_policy")
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(config=stored))
    t = trial(db, e, ended_days_ago=3)

    assert trial_logs.delete_expired_logs(db, 2) == 2
    assert logs(db, t) == []


def test_the_job_answers_how_many_lines_it_deleted_and_deletes_none_twice(db: Database) -> None:
    e = experiment(db, retention_policy={"log_retention_days": 1})
    trial(db, e, ended_days_ago=2)
    trial(db, e, ended_days_ago=3)

    assert trial_logs.delete_expired_logs(db, -1) == 4
    assert trial_logs.delete_expired_logs(db, -1) == 0


@pytest.mark.parametrize("value", ["-2", "forever", "32768", "1.5"])
def test_a_bad_cluster_default_fails_the_job_with_a_line_naming_the_setting(
    db: Database, value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__LOG_RETENTION_DAYS", value)
    kept = trial(db, experiment(db, retention_policy={"log_retention_days": 1}), ended_days_ago=5)

    with caplog.at_level(logging.WARNING, logger=housekeeping.__name__):
        assert housekeeping.run_job(housekeeping.DELETE_EXPIRED_LOGS, db) is False

    assert (
        f"airflow.cfg [det] log_retention_days: expected -1 (forever) or a number of days from 0 to 32767, got '{value}'"
        in caplog.text
    )
    assert logs(db, kept) == ["epoch 1", "epoch 2"]


def test_the_cluster_default_is_forever_unless_set() -> None:
    assert settings.load({}).log_retention_days == -1
    assert settings.load({"log_retention_days": " 14 "}).log_retention_days == 14
    assert settings.load({"log_retention_days": "-1"}).log_retention_days == -1
