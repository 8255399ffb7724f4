"""Ordered upgrades of the det tables, with the version kept in ``det_settings``.

A fresh database is created from :mod:`det_airflow.master.schema`; a database at an older version
runs each later step here, one transaction per step. Steps describe the change itself rather than
importing the current table definitions, so an old database passes through every version in turn.
Alembic's operations do the DDL (including SQLite's table rebuilds); Alembic's own version table is
not used, because Airflow's ``alembic_version`` lives in the same database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, event, inspect, select

from det_airflow.errors import DetError
from det_airflow.master import metric_points, schema

VERSION_KEY = "schema_version"


class SchemaError(DetError):
    """The det tables are missing, or at a version this det-airflow cannot handle."""


@dataclass(frozen=True)
class Migration:
    version: int  # the schema version this step produces
    description: str
    upgrade: Callable[[Operations], None]


def _v2_ids_never_reused(op: Operations) -> None:
    column = sa.Column("create_request_id", sa.String(64))
    constraint = ("det_experiments_create_request_uq", ["create_request_id"])
    if op.get_context().dialect.name == "sqlite":
        # AUTOINCREMENT can only be declared when a SQLite table is created: rebuild both tables.
        # A later step that rebuilds them must pass the same table_kwargs, or it is lost again.
        with op.batch_alter_table(
            "det_experiments", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            batch.add_column(column)
            batch.create_unique_constraint(*constraint)
        with op.batch_alter_table(
            "det_trials", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
        _skip_ids_of_leftover_dags(op.get_bind())
    else:
        # PostgreSQL's serial sequences never hand out a value twice; only the column is new.
        op.add_column("det_experiments", column)
        op.create_unique_constraint(constraint[0], "det_experiments", constraint[1])


def _skip_ids_of_leftover_dags(conn: Connection) -> None:
    """Start new experiment IDs above any `det_exp_N` DAG still in Airflow.

    Before version 2, SQLite reused the ID of a deleted newest experiment and deleting left its DAG
    behind; a new experiment with that ID would inherit the spent DAG and never start.
    """
    if not inspect(conn).has_table("dag"):
        return
    numbers = [
        int(dag_id.removeprefix("det_exp_"))
        for dag_id in conn.execute(sa.text("SELECT dag_id FROM dag WHERE dag_id LIKE 'det_exp_%'")).scalars()
        if dag_id.removeprefix("det_exp_").isdigit()
    ]
    if not numbers:
        return
    current = conn.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = 'det_experiments'")).scalar()
    if current is None:
        conn.execute(
            sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES ('det_experiments', :seq)"),
            {"seq": max(numbers)},
        )
    elif current < max(numbers):
        conn.execute(
            sa.text("UPDATE sqlite_sequence SET seq = :seq WHERE name = 'det_experiments'"),
            {"seq": max(numbers)},
        )


def _v3_job_queue(op: Operations) -> None:
    with op.batch_alter_table("det_experiments") as batch:
        batch.add_column(sa.Column("priority", sa.Integer))
        batch.add_column(sa.Column("weight", sa.Float))
        batch.add_column(sa.Column("max_slots", sa.Integer))
        batch.add_column(sa.Column("queue_position", sa.Float))
    with op.batch_alter_table("det_trials") as batch:
        batch.add_column(sa.Column("admitted_run", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("admitted_at", sa.DateTime(timezone=True)))


def _v4_preemption(op: Operations) -> None:
    with op.batch_alter_table("det_trials") as batch:
        batch.add_column(sa.Column("preempt_requested_at", sa.DateTime(timezone=True)))


def _v5_metric_chunks(op: Operations) -> None:
    chunks = op.create_table(
        "det_metric_chunks",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("det_trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("group", sa.String(64), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("points", sa.LargeBinary, nullable=False),
    )
    op.create_index("det_metric_chunks_series", "det_metric_chunks", ["trial_id", "group", "name", "id"])
    backfill_metric_chunks(op.get_bind(), chunks)


def _v6_state_changes(op: Operations) -> None:
    op.create_table(
        "det_state_changes",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("object_id", sa.String(64), nullable=False),
        sa.Column("from_state", sa.String(32)),
        sa.Column("to_state", sa.String(32), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_index("det_state_changes_object", "det_state_changes", ["kind", "object_id", "id"])


def _v7_user_ids(op: Operations) -> None:
    op.create_table(
        "det_user_ids",
        sa.Column("username", sa.String(256), primary_key=True),
        sa.Column("uid", sa.Integer, nullable=False, unique=True),
    )


def _v8_told_to_stop(op: Operations) -> None:
    with op.batch_alter_table("det_trials") as batch:
        batch.add_column(sa.Column("told_to_stop_run", sa.Integer))


def _v9_hosts(op: Operations) -> None:
    with op.batch_alter_table("det_trials") as batch:
        batch.add_column(sa.Column("host", sa.String(63)))
        batch.add_column(sa.Column("hosts", sa.JSON))
    op.create_table(
        "det_hosts",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("slot_type", sa.String(16), nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("devices", sa.JSON, nullable=False),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("address", sa.String(253)),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
    )


def _v10_removals(op: Operations) -> None:
    op.create_table(
        "det_removals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("experiment_id", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("host", sa.String(63)),
        sa.Column("pool", sa.String(256)),
        sa.Column("storage", sa.JSON),
        sa.Column("uuids", sa.JSON, nullable=False),
        sa.Column("uid", sa.Integer),
        sa.Column("gid", sa.Integer),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_by", sa.String(63)),
        sa.Column("claimed_at", sa.DateTime(timezone=True)),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("problem", sa.Text),
    )


def _v11_trial_nodes(op: Operations) -> None:
    with op.batch_alter_table("det_trials") as batch:
        batch.add_column(sa.Column("nodes", sa.JSON))
    op.create_table(
        "det_trial_nodes",
        sa.Column(
            "trial_id", sa.Integer, sa.ForeignKey("det_trials.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("rank", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("host", sa.String(63), nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("address", sa.String(253)),
        sa.Column("port", sa.Integer),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("token_hash", sa.String(64)),
        sa.Column("task", sa.JSON),
    )


def _v12_tasks(op: Operations) -> None:
    op.create_table(
        "det_tasks",
        sa.Column(
            "id", sa.Integer, sa.ForeignKey("det_experiments.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("type", sa.String(16), nullable=False, index=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("args", sa.JSON, nullable=False),
        sa.Column("address", sa.String(253)),
        sa.Column("port", sa.Integer),
        sa.Column("secret", sa.String(128)),
        sa.Column("ready_at", sa.DateTime(timezone=True)),
        sa.Column("exit_code", sa.Integer),
    )


def _v13_templates(op: Operations) -> None:
    op.create_table(
        "det_templates",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def _v14_webhooks(op: Operations) -> None:
    op.create_table(
        "det_webhooks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(256), nullable=False, unique=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("webhook_type", sa.String(16), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("triggers", sa.JSON, nullable=False),
        sa.Column("signing_key", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("experiments_of", sa.String(256)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "det_webhook_deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "webhook_id", sa.Integer, sa.ForeignKey("det_webhooks.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("trigger_type", sa.String(32), nullable=False),
        sa.Column("experiment_id", sa.Integer),
        sa.Column("event_key", sa.String(128)),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("gave_up_at", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text),
    )
    op.create_index(
        "det_webhook_deliveries_due",
        "det_webhook_deliveries",
        ["delivered_at", "gave_up_at", "next_attempt_at"],
    )
    op.create_index("det_webhook_deliveries_key", "det_webhook_deliveries", ["webhook_id", "event_key"])


def _v15_model_registry(op: Operations) -> None:
    op.create_table(
        "det_models",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(256), nullable=False, unique=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("notes", sa.Text, nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("archived", sa.Boolean, nullable=False),
        sa.Column("creation_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_updated_time", sa.DateTime(timezone=True), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "det_model_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("model_id", sa.Integer, sa.ForeignKey("det_models.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("checkpoint_uuid", sa.String(64), sa.ForeignKey("det_checkpoints.uuid"), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
        sa.Column("notes", sa.Text, nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("creation_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_updated_time", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("model_id", "version", name="det_model_versions_number_uq"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_det_model_versions_checkpoint_uuid", "det_model_versions", ["checkpoint_uuid"])


def _v16_projects(op: Operations) -> None:
    workspaces = op.create_table(
        "det_workspaces",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(256), nullable=False, unique=True),
        sa.Column("created_by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived", sa.Boolean, nullable=False),
        sqlite_autoincrement=True,
    )
    projects = op.create_table(
        "det_projects",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "workspace_id", sa.Integer, sa.ForeignKey("det_workspaces.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("notes", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived", sa.Boolean, nullable=False),
        sa.UniqueConstraint("workspace_id", "name", name="det_projects_name_uq"),
        sqlite_autoincrement=True,
    )
    op.add_column("det_experiments", sa.Column("project_id", sa.Integer))
    op.create_index("ix_det_experiments_project_id", "det_experiments", ["project_id"])
    # Every experiment so far stays where project_id None puts it: the Uncategorized project.
    conn = op.get_bind()
    common = {"created_by": "admin", "created_at": datetime.now(UTC), "archived": False}
    result = conn.execute(workspaces.insert().values(name="Uncategorized", **common))
    workspace_id = result.inserted_primary_key[0]  # type: ignore[index]
    conn.execute(
        projects.insert().values(
            workspace_id=workspace_id, name="Uncategorized", description="", notes="", **common
        )
    )


def _v17_owned_names(op: Operations) -> None:
    """Model names become unique per owner, template names per owner plus a shared namespace.

    No stored rows collide: model names and template names were unique before. Every existing
    template becomes its creator's own; an admin shares one again with `det template set --shared`.
    """
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        # SQLite cannot drop a constraint: rebuild, naming the unnamed UNIQUE (name) to drop it,
        # with the AUTOINCREMENT the table was created with (see _v2_ids_never_reused).
        with op.batch_alter_table(
            "det_models",
            recreate="always",
            table_kwargs={"sqlite_autoincrement": True},
            naming_convention={"uq": "%(table_name)s_%(column_0_name)s_key"},
        ) as batch:
            batch.drop_constraint("det_models_name_key", type_="unique")
            batch.create_unique_constraint("det_models_owner_name_uq", ["owner", "name"])
    else:
        for unique in inspect(conn).get_unique_constraints("det_models"):
            if unique["column_names"] == ["name"] and unique["name"]:
                op.drop_constraint(unique["name"], "det_models", type_="unique")
        op.create_unique_constraint("det_models_owner_name_uq", "det_models", ["owner", "name"])

    # The primary key changes from (name) to (namespace, name): templates are few config fragments,
    # so the table is made again around its rows.
    old = sa.table(
        "det_templates",
        sa.column("name", sa.String),
        sa.column("config", sa.JSON),
        sa.column("owner", sa.String),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    rows = [dict(row) for row in conn.execute(select(old)).mappings()]
    op.drop_table("det_templates")
    templates = op.create_table(
        "det_templates",
        sa.Column("namespace", sa.String(256), primary_key=True),
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    if rows:
        op.bulk_insert(templates, [{**row, "namespace": row["owner"]} for row in rows])


def _v18_checkpoint_claims(op: Operations) -> None:
    """Trials write their checkpoints through the master: which trial claimed which uuid."""
    op.create_table(
        "det_checkpoint_claims",
        sa.Column("uuid", sa.String(64), primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer,
            sa.ForeignKey("det_trials.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
    )


def _v19_used_grants(op: Operations) -> None:
    """Task grants are taken once: the ids of those taken, until they expire."""
    op.create_table(
        "det_used_grants",
        sa.Column("jti", sa.String(64), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False, index=True),
    )


def _v20_models_in_workspaces_and_host_switches(op: Operations) -> None:
    """Models live in workspaces (None: the Uncategorized one, where every model so far stays);
    what an admin disabled of the worker hosts (none so far)."""
    conn = op.get_bind()
    column = sa.Column("workspace_id", sa.Integer)
    foreign_key = ("det_models_workspace_id_fkey", "det_workspaces", ["workspace_id"], ["id"])
    if conn.dialect.name == "sqlite":
        # SQLite adds no foreign key to a table: rebuild it, with its AUTOINCREMENT (see v2).
        with op.batch_alter_table(
            "det_models", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            batch.add_column(column)
            batch.create_foreign_key(*foreign_key)
            batch.create_index("ix_det_models_workspace_id", ["workspace_id"])
    else:
        op.add_column("det_models", column)
        op.create_foreign_key(foreign_key[0], "det_models", *foreign_key[1:])
        op.create_index("ix_det_models_workspace_id", "det_models", ["workspace_id"])
    op.create_table(
        "det_host_switches",
        sa.Column("host_id", sa.String(63), primary_key=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("draining", sa.Boolean, nullable=False),
        sa.Column("disabled_slots", sa.JSON, nullable=False),
        sa.Column("changed_by", sa.String(256), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )


def _v21_log_sources(op: Operations) -> None:
    """Trial log lines record who wrote them (the trial's processes or the master); lines stored
    before stay without one."""
    op.add_column("det_trial_logs", sa.Column("source", sa.String(16)))


def _v22_experiment_notes(op: Operations) -> None:
    """Experiments get Markdown notes; those stored before have none."""
    op.add_column("det_experiments", sa.Column("notes", sa.Text))


def backfill_metric_chunks(conn: Connection, chunks: sa.Table = schema.metric_chunks) -> int:
    """Rebuild the charts' numbers from every stored metric row; returns the trials that had some."""
    metrics = sa.table(
        "det_metrics",
        sa.column("id", sa.BigInteger),
        sa.column("trial_id", sa.Integer),
        sa.column("group", sa.String),
        sa.column("steps_completed", sa.BigInteger),
        sa.column("metrics", sa.JSON),
        sa.column("report_time", sa.DateTime(timezone=True)),
    )
    conn.execute(chunks.delete())
    charted = metrics.c.group.in_(metric_points.GROUPS)
    trial_ids = conn.execute(
        select(metrics.c.trial_id).where(charted).distinct().order_by(metrics.c.trial_id)
    ).scalars()
    count = 0
    for trial_id in list(trial_ids):
        rows = conn.execute(
            select(metrics.c.group, metrics.c.steps_completed, metrics.c.metrics, metrics.c.report_time)
            .where(metrics.c.trial_id == trial_id, charted)
            .order_by(metrics.c.id)
        ).mappings()
        metric_points.store(conn, trial_id, rows, table=chunks)
        count += 1
    return count


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        2,
        "experiment and trial IDs are never reused; det_experiments.create_request_id",
        _v2_ids_never_reused,
    ),
    Migration(
        3,
        "job queue: experiment priority, weight, max_slots, queue_position; trial admission",
        _v3_job_queue,
    ),
    Migration(4, "preemption: det_trials.preempt_requested_at", _v4_preemption),
    Migration(
        5,
        "learning curves: det_metric_chunks, the numbers of every metric row, backfilled",
        _v5_metric_chunks,
    ),
    Migration(
        6, "lifecycle: det_state_changes, each state change with its time and reason", _v6_state_changes
    ),
    Migration(7, "one OS identity per experiment owner: det_user_ids", _v7_user_ids),
    Migration(8, "trials: told_to_stop_run, the run the master last asked to stop", _v8_told_to_stop),
    Migration(9, "hosts: det_hosts, the workers' inventory; det_trials.host and hosts", _v9_hosts),
    Migration(10, "file removals done by the hosts that have the files: det_removals", _v10_removals),
    Migration(11, "multi-node trials: det_trials.nodes, det_trial_nodes", _v11_trial_nodes),
    Migration(
        12, "tasks beside experiments (notebooks, TensorBoards, commands, shells): det_tasks", _v12_tasks
    ),
    Migration(
        13, "config templates merged into the experiments that name them: det_templates", _v13_templates
    ),
    Migration(14, "webhooks and their deliveries: det_webhooks, det_webhook_deliveries", _v14_webhooks),
    Migration(15, "the model registry: det_models, det_model_versions", _v15_model_registry),
    Migration(
        16, "workspaces and projects: det_workspaces, det_projects, det_experiments.project_id", _v16_projects
    ),
    Migration(
        17,
        "owned names: model names unique per owner; det_templates.namespace, personal or shared",
        _v17_owned_names,
    ),
    Migration(
        18,
        "checkpoints written through the master: det_checkpoint_claims, the trial that claimed each uuid",
        _v18_checkpoint_claims,
    ),
    Migration(19, "task grants taken once: det_used_grants", _v19_used_grants),
    Migration(
        20,
        "models in workspaces: det_models.workspace_id; agents and slots disabled by an admin: "
        "det_host_switches",
        _v20_models_in_workspaces_and_host_switches,
    ),
    Migration(
        21, "trial log lines name their source (task or master): det_trial_logs.source", _v21_log_sources
    ),
    Migration(22, "experiments' Markdown notes: det_experiments.notes", _v22_experiment_notes),
)


def stored_version(conn: Connection) -> int | None:
    """The det schema version recorded in the database, or None when there are no det tables."""
    if not inspect(conn).has_table(schema.settings.name):
        return None
    value = conn.execute(select(schema.settings.c.value).where(schema.settings.c.key == VERSION_KEY)).scalar()
    return int(value) if value is not None else None


def _set_version(conn: Connection, version: int) -> None:
    table = schema.settings
    if conn.execute(select(table.c.key).where(table.c.key == VERSION_KEY)).first():
        conn.execute(table.update().where(table.c.key == VERSION_KEY).values(value=str(version)))
    else:
        conn.execute(table.insert().values(key=VERSION_KEY, value=str(version)))


def _migration_engine(url: str) -> Engine:
    """An engine whose transactions also cover DDL, with SQLite's foreign keys off.

    pysqlite only opens a transaction before DML, so a failed rebuild could leave half a table
    behind; here BEGIN is sent explicitly. Foreign keys stay off (SQLite's default) so that dropping
    a rebuilt table does not cascade into the rows that reference it.
    """
    engine = create_engine(url, connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _manual_transactions(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def upgrade(engine: Engine) -> tuple[int | None, int]:
    """Create the det tables, or bring them to ``schema.SCHEMA_VERSION``; (version before, after)."""
    with engine.connect() as conn:
        before = stored_version(conn)
    target = schema.SCHEMA_VERSION
    if before is not None and before > target:
        raise SchemaError(
            f"the det tables are at schema version {before}, newer than this det-airflow ({target}); "
            "upgrade det-airflow"
        )
    if before is None:
        with engine.begin() as conn:
            schema.metadata.create_all(conn)
            _set_version(conn, target)
        return None, target
    if before == target:
        return before, target
    steps = [m for m in MIGRATIONS if m.version > before]
    sqlite = engine.dialect.name == "sqlite"
    runner = _migration_engine(engine.url.render_as_string(hide_password=False)) if sqlite else engine
    # Alembic announces its dialect on every context; `det admin migrate` prints its own summary.
    alembic_log = logging.getLogger("alembic.runtime.migration")
    alembic_level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)
    try:
        for step in steps:
            with runner.begin() as conn:
                step.upgrade(Operations(MigrationContext.configure(conn)))
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise SchemaError(
                            f"schema step {step.version} ({step.description}) would leave rows whose "
                            f"references are broken: {broken[:5]}; nothing was changed"
                        )
                _set_version(conn, step.version)
    finally:
        alembic_log.setLevel(alembic_level)
        if runner is not engine:
            runner.dispose()
    return before, target
