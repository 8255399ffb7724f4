"""`det e delete` on a real Airflow, and `det admin migrate` upgrading a real version-1 database.

Deleting an experiment must leave nothing of it behind (its DAG in Airflow, its YAML in the DAGs
folder, its checkpoints, its trial work directory), and the next experiment must get a new ID and
run: a reused ID would inherit the deleted experiment's spent DAG and never start.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from det_airflow.dagfactory import FINISHED_SUBDIR, experiment_file
from det_airflow.localairflow import LocalAirflow
from det_airflow.master import schema
from det_airflow.master.db import Database
from tests.integration.det_env import DET, EXAMPLE, DetEnv, kept_checkpoints, wait_until
from tests.unit.master.test_migrations import build_v1, check_upgraded, row_counts

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def det(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    af: LocalAirflow = request.getfixturevalue("airflow" if request.param == "postgres" else "airflow_sqlite")
    yield DetEnv.install(af, tmp_path_factory.mktemp("det-config"))


def short_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 100}
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def dag_ids(det: DetEnv, *, exclude_stale: bool = False) -> set[str]:
    """Every DAG in Airflow's DAG list, stale ones included unless `exclude_stale`."""
    with det.api() as client:
        answer = client.get(
            "/api/v2/dags", params={"limit": 1000, "exclude_stale": str(exclude_stale).lower()}
        )
        return {dag["dag_id"] for dag in answer.raise_for_status().json()["dags"]}


def test_deleted_experiment_leaves_nothing_and_its_id_is_never_reused(det: DetEnv, tmp_path: Path) -> None:
    config = short_config(tmp_path)
    first = det.create(config)
    experiment = det.wait_experiment(first)["experiment"]
    assert experiment["state"] == "COMPLETED"
    det.wait_dag_run(experiment)
    dag_id = experiment["dag_id"]
    # The ones the storage policy keeps (the others were deleted when the trial ended).
    kept = kept_checkpoints(det.get(f"/experiments/{first}/checkpoints")["checkpoints"])
    checkpoints = [Path(c["storage"]["path"]) for c in kept]
    # Its YAML, still in the parsed folder or already retired (the run has ended).
    config_file = experiment_file(det.af.dags_folder, first)
    retired = config_file.parent / FINISHED_SUBDIR / config_file.name
    assert config_file.exists() or retired.exists()
    assert dag_id in dag_ids(det)
    work_dir = det.af.home / "det-trials" / f"exp_{first}"
    assert work_dir.is_dir()

    deleted = det.det("experiment", "delete", str(first), "--yes")

    lines = deleted.stdout.splitlines()
    assert lines[0] == f"Deleted experiment {first}"
    assert lines[1].startswith(f"Removing in the background: {len(checkpoints)} checkpoint"), lines
    assert lines[1].endswith("; the trial work directory on " + socket.gethostname()), lines
    assert deleted.stderr == ""
    # A parse of the DAG processor in flight during the delete can register the DAG once more (a
    # known race, issue 12); the parse the delete requests marks it stale, so no active DAG is left
    # once that parse is done.
    wait_until(lambda: dag_id not in dag_ids(det, exclude_stale=True), f"{dag_id} gone from the active DAGs")
    assert not config_file.exists() and not retired.exists()
    # The master removes the files in the background, on this one machine.
    wait_until(
        lambda: not work_dir.exists() and not [p for p in checkpoints if p.exists()] or None,
        "the checkpoints and the trial work folder removed",
    )
    with det.api() as client:
        assert client.get(f"/det/api/v1/experiments/{first}").status_code == 404

        # A DAG parsed back may have got a run of its @once schedule before it went stale: the
        # master's `forget deleted experiments' DAGs` removes it with its runs (every 30 s).
        def no_run() -> bool:
            runs = client.get(f"/api/v2/dags/{dag_id}/dagRuns")
            return runs.status_code == 404 or runs.json()["dag_runs"] == []

        wait_until(no_run, f"no run of {dag_id} left", timeout=90)

    second = det.create(config)
    assert second > first
    assert det.wait_experiment(second)["experiment"]["state"] == "COMPLETED"
    # By now the DAG processor has parsed the factory several times: the deleted DAG stays gone. A
    # parse in flight while the master forgets the stale DAG may register it for one more parse
    # interval (the race above, again); the next parse marks it stale.
    wait_until(
        lambda: dag_id not in dag_ids(det, exclude_stale=True), f"{dag_id} still gone from the active DAGs"
    )


def test_an_experiment_still_running_is_not_deleted(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(short_config(tmp_path), EXAMPLE, "--paused")

    refused = det.det("experiment", "delete", str(experiment_id), "--yes", check=False)

    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        f"experiment {experiment_id} is PAUSED; cancel or kill it before deleting it"
    ), refused.stderr
    assert "Traceback" not in refused.stderr
    assert det.get(f"/experiments/{experiment_id}")["experiment"]["state"] == "PAUSED"
    assert experiment_file(det.af.dags_folder, experiment_id).exists()

    det.det("experiment", "kill", str(experiment_id))
    ended = det.wait_experiment(experiment_id)["experiment"]

    # Killed while paused, the experiment may end before Airflow has even parsed its DAG; the DAG
    # then gets its run later, and the delete is refused, naming that run, until the run has ended.
    def deleted() -> bool:
        result = det.det("experiment", "delete", str(experiment_id), "--yes", check=False)
        if result.returncode == 0:
            return True
        assert (
            "is still running in Airflow; delete the experiment once that run has ended" in result.stderr
        ), result.stderr
        assert "Traceback" not in result.stderr
        return False

    wait_until(deleted, f"experiment {experiment_id} deleted once its DAG run has ended")
    again = det.det("experiment", "delete", str(experiment_id), "--yes", check=False)
    assert again.returncode == 1 and f"experiment {experiment_id} not found" in again.stderr, again.stderr
    # A parse that registered the DAG in the instant of the delete is undone by the next parse.
    wait_until(
        lambda: ended["dag_id"] not in dag_ids(det, exclude_stale=True),
        f"DAG {ended['dag_id']} leaving Airflow's DAG list",
    )


@pytest.fixture
def version_1_database(postgres_url: str) -> Iterator[str]:
    """A new database on the test PostgreSQL server holding det tables at version 1, with rows."""
    server = make_url(postgres_url).set(drivername="postgresql+psycopg2")
    name = f"det_v1_{secrets.token_hex(4)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def test_det_admin_migrate_upgrades_a_version_1_postgresql_database(
    airflow: LocalAirflow, version_1_database: str
) -> None:
    from airflow.models.connection import Connection
    from airflow.models.team import Team

    db = Database(version_1_database)
    build_v1(db.engine)
    # `det admin migrate` also keeps the det_default connection, in Airflow's own tables.
    for model in (Team, Connection):
        model.__table__.create(db.engine)  # type: ignore[attr-defined]
    rows_before = row_counts(db.engine)
    env = {**airflow.env(), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": version_1_database}

    def migrate() -> str:
        result = subprocess.run([str(DET), "admin", "migrate"], env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    upgraded, again = migrate(), migrate()

    assert f"det tables: upgraded from version 1 to {schema.SCHEMA_VERSION}" in upgraded.splitlines()
    assert f"det tables: already at version {schema.SCHEMA_VERSION}" in again.splitlines()
    assert "alembic" not in upgraded
    check_upgraded(db, rows_before)
    db.engine.dispose()
