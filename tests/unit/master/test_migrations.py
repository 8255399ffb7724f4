"""Upgrading a version-1 database keeps every row and stops IDs from being reused."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from det_airflow.master import migrations, schema
from det_airflow.master.db import Database, SchemaError
from tests.unit.master import schema_v1

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EXPERIMENTS = 3
TRIALS_PER_EXPERIMENT = 2


def build_v1(engine: Engine) -> None:
    """A version-1 database as `det admin migrate` made it, with rows in every table."""
    schema_v1.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(schema_v1.settings.insert().values(key="schema_version", value="1"))
        conn.execute(schema_v1.settings.insert().values(key="service_token_hash", value="abc"))
        # IDs come from the database, as they did in use (PostgreSQL's sequence must see them).
        for n in range(1, EXPERIMENTS + 1):
            e = conn.execute(
                schema_v1.experiments.insert().values(
                    name=f"exp-{n}",
                    owner="admin",
                    labels=["a"],
                    state="COMPLETED",
                    config={"searcher": {"name": "single"}},
                    config_yaml="searcher: {name: single}\n",
                    context=b"\x1f\x8b",
                    dag_id=f"det_exp_{n}",
                    resource_pool="default_pool",
                    searcher_name="single",
                    search_done=True,
                    progress=1.0,
                    start_time=NOW,
                    archived=False,
                )
            ).inserted_primary_key[0]  # type: ignore[index]
            for r in range(TRIALS_PER_EXPERIMENT):
                trial_id = conn.execute(
                    schema_v1.trials.insert().values(
                        experiment_id=e,
                        request_id=r,
                        state="COMPLETED",
                        hparams={"lr": 0.1},
                        trial_seed=7,
                        total_batches=10,
                        restarts=0,
                        run_id=1,
                        progress=1.0,
                        summary={},
                        stop_requested=False,
                        pause_requested=False,
                        op_completed=True,
                    )
                ).inserted_primary_key[0]  # type: ignore[index]
                conn.execute(
                    schema_v1.metrics.insert().values(
                        trial_id=trial_id,
                        group="training",
                        steps_completed=10,
                        metrics={"loss": 0.5},
                        report_time=NOW,
                        trial_run_id=1,
                    )
                )
                conn.execute(
                    schema_v1.checkpoints.insert().values(
                        uuid=f"ckpt-{trial_id}",
                        trial_id=trial_id,
                        experiment_id=e,
                        steps_completed=10,
                        state="COMPLETED",
                        metadata={},
                        resources={},
                        size=1,
                        storage={"type": "shared_fs", "path": "/x"},
                        report_time=NOW,
                    )
                )
                conn.execute(
                    schema_v1.trial_logs.insert().values(trial_id=trial_id, timestamp=NOW, message="hello")
                )


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        present = set(inspect(conn).get_table_names())
        return {
            table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in schema.metadata.sorted_tables
            if table.name in present
        }


def insert_experiment(engine: Engine) -> int:
    with engine.begin() as conn:
        result = conn.execute(
            schema.experiments.insert().values(
                name="next",
                owner="admin",
                labels=[],
                state="ACTIVE",
                config={},
                config_yaml="",
                resource_pool="default_pool",
                searcher_name="single",
                search_done=False,
                progress=0.0,
                start_time=NOW,
                archived=False,
            )
        )
        return int(result.inserted_primary_key[0])  # type: ignore[index]


def insert_trial(engine: Engine, experiment_id: int) -> int:
    with engine.begin() as conn:
        result = conn.execute(
            schema.trials.insert().values(
                experiment_id=experiment_id,
                request_id=0,
                state="QUEUED",
                hparams={},
                trial_seed=1,
                summary={},
            )
        )
        return int(result.inserted_primary_key[0])  # type: ignore[index]


def delete_experiment_rows(engine: Engine, experiment_id: int) -> None:
    with engine.begin() as conn:
        trial_ids = select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
        for table in (schema.trial_logs, schema.metrics, schema.checkpoints):
            conn.execute(table.delete().where(table.c.trial_id.in_(trial_ids)))
        conn.execute(schema.trials.delete().where(schema.trials.c.experiment_id == experiment_id))
        conn.execute(schema.experiments.delete().where(schema.experiments.c.id == experiment_id))


def check_upgraded(db: Database, rows_before: dict[str, int]) -> None:
    """A version-1 database after the upgrade: every row kept, the new column, IDs never reused.

    Shared with the PostgreSQL test in tests/integration/test_delete.py.
    """
    # `det admin migrate` may add settings (the service token's hash); it never drops one.
    rows_after = row_counts(db.engine)
    assert rows_after.pop("det_settings") >= rows_before["det_settings"]
    # Version 5 keeps the numbers of each metric report for charts: here one series, in one chunk, a trial.
    assert rows_after.pop("det_metric_chunks") == rows_before["det_metrics"]
    # Version 6 records state changes from the upgrade on: the history starts empty.
    assert rows_after.pop("det_state_changes") == 0
    # Version 7 allocates an owner's uid when a trial of theirs first runs: none yet.
    assert rows_after.pop("det_user_ids") == 0
    # Version 9 knows a host from its first heartbeat on: none yet.
    assert rows_after.pop("det_hosts") == 0
    assert rows_after.pop("det_removals") == 0
    assert rows_after.pop("det_trial_nodes") == 0
    assert rows_after.pop("det_tasks") == 0
    # Version 13's templates are set by people after the upgrade: none yet.
    assert rows_after.pop("det_templates") == 0
    assert rows_after.pop("det_webhooks") == 0
    assert rows_after.pop("det_webhook_deliveries") == 0
    assert rows_after.pop("det_models") == 0
    assert rows_after.pop("det_model_versions") == 0
    # Version 16 makes the Uncategorized workspace and project, where every experiment so far lives.
    assert rows_after.pop("det_workspaces") == 1
    assert rows_after.pop("det_projects") == 1
    # Version 18 records the checkpoints trials write through the master from the upgrade on.
    assert rows_after.pop("det_checkpoint_claims") == 0
    # Version 19 records task grants as they are taken.
    assert rows_after.pop("det_used_grants") == 0
    # Version 20 records what an admin disables of the hosts from the upgrade on: nothing yet.
    assert rows_after.pop("det_host_switches") == 0
    assert rows_after == {name: n for name, n in rows_before.items() if name != "det_settings"}
    with db.read() as conn:
        names = conn.execute(select(schema.experiments.c.name).order_by(schema.experiments.c.id)).scalars()
        assert list(names) == ["exp-1", "exp-2", "exp-3"]
        assert (
            conn.execute(select(schema.trials.c.experiment_id).where(schema.trials.c.id == 6)).scalar() == 3
        )
    assert "create_request_id" in {c["name"] for c in inspect(db.engine).get_columns("det_experiments")}
    db.check()

    newest_trial = EXPERIMENTS * TRIALS_PER_EXPERIMENT
    delete_experiment_rows(db.engine, EXPERIMENTS)
    new_experiment = insert_experiment(db.engine)
    assert new_experiment == EXPERIMENTS + 1
    assert insert_trial(db.engine, new_experiment) == newest_trial + 1

    with db.begin() as conn:
        conn.execute(
            schema.experiments.update().where(schema.experiments.c.id == 1).values(create_request_id="req-1")
        )
    with pytest.raises(IntegrityError), db.begin() as conn:
        conn.execute(
            schema.experiments.update().where(schema.experiments.c.id == 2).values(create_request_id="req-1")
        )


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'airflow.db'}"


def test_version_1_sqlite_database_is_upgraded_in_place(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    build_v1(db.engine)
    rows_before = row_counts(db.engine)

    assert db.migrate() == (1, schema.SCHEMA_VERSION)

    check_upgraded(db, rows_before)
    assert db.migrate() == (schema.SCHEMA_VERSION, schema.SCHEMA_VERSION)


def test_upgrade_keeps_foreign_keys_cascading(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    build_v1(db.engine)
    db.migrate()
    with db.begin() as conn:
        conn.execute(schema.experiments.delete().where(schema.experiments.c.id == 1))
    with db.read() as conn:
        assert (
            conn.execute(
                select(func.count()).select_from(schema.trials).where(schema.trials.c.experiment_id == 1)
            ).scalar()
            == 0
        )
        assert conn.execute(text("PRAGMA foreign_key_check")).all() == []


def test_fresh_database_is_created_at_the_current_version(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    assert db.migrate() == (None, schema.SCHEMA_VERSION)
    first = insert_experiment(db.engine)
    delete_experiment_rows(db.engine, first)
    assert insert_experiment(db.engine) == first + 1


def test_a_newer_database_is_refused_untouched(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    db.migrate()
    with db.begin() as conn:
        conn.execute(
            schema.settings.update().where(schema.settings.c.key == "schema_version").values(value="99")
        )
    with pytest.raises(SchemaError, match="schema version 99, newer than this det-airflow"):
        db.migrate()
    assert db.schema_version() == 99


def test_an_old_database_is_refused_until_migrated(tmp_path: Path) -> None:
    engine = create_engine(sqlite_url(tmp_path))
    build_v1(engine)
    db = Database(sqlite_url(tmp_path))
    with pytest.raises(SchemaError, match="at version 1, expected version .*run `det admin migrate`"):
        db.check()


def test_migrations_are_ordered_and_end_at_the_current_version() -> None:
    versions = [m.version for m in migrations.MIGRATIONS]
    assert versions == list(range(schema_v1.VERSION + 1, schema.SCHEMA_VERSION + 1))


def test_an_upgraded_database_matches_a_fresh_one(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    db = Database(sqlite_url(tmp_path))
    build_v1(db.engine)
    db.migrate()
    with db.read() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), schema.metadata)
        ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'det_experiments'")).scalar()
    assert differences == []
    assert "AUTOINCREMENT" in ddl


def test_new_ids_skip_the_dags_an_old_delete_left_in_airflow(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    build_v1(db.engine)
    with db.begin() as conn:
        # Airflow's DAG table, as an old `det e delete` of experiments 4 and 5 left it.
        conn.execute(text("CREATE TABLE dag (dag_id VARCHAR(250) PRIMARY KEY)"))
        for dag_id in ("det_exp_1", "det_exp_5", "det_exp_4", "det_digits", "det_exp_x"):
            conn.execute(text("INSERT INTO dag (dag_id) VALUES (:d)"), {"d": dag_id})

    db.migrate()

    assert insert_experiment(db.engine) == 6


def test_a_step_that_fails_part_way_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = Database(sqlite_url(tmp_path))
    build_v1(db.engine)
    rows_before = row_counts_v1(db.engine)
    step = migrations.MIGRATIONS[0]  # version 2, the first step after version 1

    def rebuild_then_fail(op: Any) -> None:
        step.upgrade(op)
        raise RuntimeError("disk full")

    monkeypatch.setattr(
        migrations, "MIGRATIONS", (migrations.Migration(2, step.description, rebuild_then_fail),)
    )

    with pytest.raises(RuntimeError, match="disk full"):
        db.migrate()

    assert db.schema_version() == 1
    assert row_counts_v1(db.engine) == rows_before
    assert "create_request_id" not in {c["name"] for c in inspect(db.engine).get_columns("det_experiments")}


def row_counts_v1(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in schema_v1.metadata.sorted_tables
        }


@pytest.mark.parametrize(
    ("before", "after", "line"),
    [
        (None, 2, "det tables: created at version 2"),
        (1, 2, "det tables: upgraded from version 1 to 2"),
        (2, 2, "det tables: already at version 2"),
    ],
)
def test_det_admin_migrate_says_what_it_did(before: int | None, after: int, line: str) -> None:
    from det_airflow.master.admin import migration_summary

    assert migration_summary(before, after) == line
