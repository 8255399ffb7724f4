"""The local Airflow's Celery mode: the airflow.cfg it writes, each worker's host settings, and the
errors a user sees when Redis or PostgreSQL is missing. Nothing here starts Airflow or Celery."""

from __future__ import annotations

import configparser
import sys
from pathlib import Path

import pytest

from det_airflow import localairflow
from det_airflow.localairflow import (
    AIRFLOW_BIN,
    CeleryLayout,
    LocalAirflow,
    LocalAirflowError,
    celery_workers,
    init_celery,
    write_config,
)

PG_URL = "postgresql://airflow:pw@127.0.0.1:5432/airflow"


def read_cfg(home: Path) -> configparser.RawConfigParser:
    cfg = configparser.RawConfigParser()
    cfg.read(home / "airflow.cfg")
    return cfg


def celery_home(tmp_path: Path, workers: int = 2, host_slots: int = 3) -> LocalAirflow:
    layout = CeleryLayout(redis_port=6390, workers=celery_workers(workers, host_slots))
    return write_config(
        tmp_path / "home",
        sql_alchemy_conn=PG_URL,
        dags_folder=tmp_path / "dags",
        port=8123,
        parallelism=4,
        celery=layout,
    )


def test_each_worker_is_a_host_with_its_own_queue_id_slots_and_folders(tmp_path: Path) -> None:
    workers = celery_workers(2, host_slots=3)
    assert [w.host_id for w in workers] == ["worker-1", "worker-2"]
    second = workers[1]
    assert second.component == "celery-worker-2"
    assert second.queues == ["default", "det-host-worker-2"]
    assert second.args() == [
        "celery", "worker",
        "--queues", "default,det-host-worker-2",
        "--celery-hostname", "worker-2@%h",
        "--skip-serve-logs",
    ]  # fmt: skip
    assert second.env(tmp_path) == {
        "AIRFLOW__DET__HOST_ID": "worker-2",
        "AIRFLOW__DET__HOST_SLOTS": "3",
        "AIRFLOW__DET__TRIAL_WORK_DIR": str(tmp_path / "hosts" / "worker-2" / "trials"),
        "AIRFLOW__DET__SLOT_LOCK_DIR": str(tmp_path / "hosts" / "worker-2" / "slot-locks"),
    }


def test_the_celery_config_names_executor_broker_result_backend_and_det_options(tmp_path: Path) -> None:
    af = celery_home(tmp_path)
    cfg = read_cfg(af.home)
    assert cfg.get("core", "executor") == "CeleryExecutor"
    assert af.celery is not None and af.celery.redis_password
    assert dict(cfg["celery"]) == {
        # Redis asks a password only airflow.cfg's reader knows (trials run on this machine).
        "broker_url": f"redis://:{af.celery.redis_password}@127.0.0.1:6390/0",
        "result_backend": f"db+{PG_URL}",
        "celery_config_options": "det_airflow.celery_config.DET_CELERY_CONFIG",
        # Twice the host's 3 slots, above the given 4: slots that start only to defer need room.
        "worker_concurrency": "6",
    }
    # The executor's limit is every worker's processes, and a task's end is noticed within 1 s.
    assert cfg.get("core", "parallelism") == "12"
    assert cfg.get("workers", "min_heartbeat_interval") == "1"
    # The API server's pool has room for the tasks of every slot starting at once.
    assert cfg.get("database", "sql_alchemy_max_overflow") == "24"
    assert cfg.get("database", "sql_alchemy_conn") == PG_URL
    # the host settings go to each worker alone, never into the file every component reads
    assert not cfg.has_option("det", "host_id")


def test_a_reloaded_home_knows_its_workers_and_redis(tmp_path: Path) -> None:
    af = celery_home(tmp_path, workers=3, host_slots=1)
    loaded = LocalAirflow.load(af.home)
    assert af.celery is not None
    password = af.celery.redis_password
    assert loaded.celery == CeleryLayout(
        redis_port=6390, workers=celery_workers(3, 1), redis_password=password
    )
    commands = loaded.components()
    assert list(commands) == [
        "redis", "scheduler", "dag-processor", "triggerer", "api-server",
        "celery-worker-1", "celery-worker-2", "celery-worker-3",
    ]  # fmt: skip
    # The password is in a file of the home's user alone, never on a command line others can read.
    assert commands["redis"] == [
        "/usr/bin/redis-server", str(af.home / "redis" / "redis.conf"),
        "--bind", "127.0.0.1", "--port", "6390",
        "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
        "--dir", str(af.home / "redis"),
    ]  # fmt: skip
    assert password is not None and password not in " ".join(commands["redis"])
    config = af.home / "redis" / "redis.conf"
    assert f"requirepass {password}" in config.read_text().splitlines()
    assert (config.stat().st_mode & 0o777, config.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert commands["celery-worker-3"][:3] == [str(AIRFLOW_BIN), "celery", "worker"]
    assert loaded.postgres() is None  # the database was given, not the home's own


def test_only_a_worker_process_gets_its_host_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__HOST_ID", "from-the-caller")
    af = LocalAirflow.load(celery_home(tmp_path).home)
    assert af.env("celery-worker-1")["AIRFLOW__DET__HOST_ID"] == "worker-1"
    assert af.env("celery-worker-2")["AIRFLOW__DET__HOST_ID"] == "worker-2"
    assert "AIRFLOW__DET__HOST_ID" not in af.env("scheduler")
    assert "AIRFLOW__DET__HOST_ID" not in af.env()


def test_local_mode_config_has_no_celery_pieces(tmp_path: Path) -> None:
    af = write_config(
        tmp_path / "home", sql_alchemy_conn="sqlite:////x.db", dags_folder=tmp_path / "dags", port=8124
    )
    cfg = read_cfg(af.home)
    assert cfg.get("core", "executor") == "LocalExecutor"
    assert cfg.sections() == [
        "core", "database", "api", "api_auth", "workers", "dag_processor", "scheduler", "logging",
    ]  # fmt: skip
    loaded = LocalAirflow.load(af.home)
    assert loaded.celery is None
    assert loaded.components() == {
        "scheduler": [str(AIRFLOW_BIN), "scheduler", "--skip-serve-logs"],
        "dag-processor": [str(AIRFLOW_BIN), "dag-processor"],
        "triggerer": [str(AIRFLOW_BIN), "triggerer", "--skip-serve-logs"],
        "api-server": [str(AIRFLOW_BIN), "api-server", "--host", "127.0.0.1", "--port", "8124"],
    }
    assert not (af.home / "hosts").exists()


def test_reinit_keeps_the_redis_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localairflow, "REDIS_SERVER", Path(sys.executable))
    home = celery_home(tmp_path).home
    password = LocalAirflow.load(home).celery.redis_password  # type: ignore[union-attr]
    layout, url, opened = init_celery(home, workers=4, host_slots=2, sql_alchemy_conn=PG_URL)
    assert (layout.redis_port, len(layout.workers), url, opened) == (6390, 4, PG_URL, [])
    assert layout.redis_password == password  # running workers keep their broker


@pytest.mark.parametrize(("workers", "slots", "flag"), [(0, 2, "--workers"), (2, 0, "--host-slots")])
def test_bad_counts_name_their_flag(workers: int, slots: int, flag: str) -> None:
    with pytest.raises(LocalAirflowError, match=f"^{flag}: expected at least 1"):
        celery_workers(workers, slots)


def run_init(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = localairflow.main(
        [
            "--home",
            str(tmp_path / "home"),
            "init",
            "--executor",
            "celery",
            "--dags-folder",
            str(tmp_path),
            *extra,
        ]
    )
    return code, capsys.readouterr().err


def test_missing_redis_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(localairflow, "REDIS_SERVER", tmp_path / "no-redis-server")
    code, err = run_init(tmp_path, capsys)
    assert code == 1
    assert "apt-get install redis-server" in err
    assert "Traceback" not in err


def test_missing_postgres_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(localairflow, "REDIS_SERVER", Path(sys.executable))
    monkeypatch.setattr(localairflow._pgcluster, "find_bindir", lambda: None)
    code, err = run_init(tmp_path, capsys)
    assert code == 1
    assert "apt-get install postgresql" in err
    assert "--sql-alchemy-conn" in err
    assert "Traceback" not in err
    assert not (tmp_path / "home" / "airflow.cfg").exists()
