"""The master's tables. They live in the Airflow metadata database, prefixed ``det_``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.engine import Connection

# Bump when a table changes; `det admin migrate` brings a database up to this version.
SCHEMA_VERSION = 22

metadata = MetaData()

settings = Table(
    "det_settings",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=False),
)

experiments = Table(
    "det_experiments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False),
    Column("owner", String(256), nullable=False),
    Column("description", Text),
    Column("labels", JSON, nullable=False),
    Column("state", String(32), nullable=False, index=True),
    Column("config", JSON, nullable=False),  # normalized, defaults filled
    Column("config_yaml", Text, nullable=False),  # as submitted
    Column("context", LargeBinary),  # tar.gz of the context directory
    Column("dag_id", String(250)),
    Column("dag_run_id", String(250)),
    Column("parent_id", Integer),
    Column("resource_pool", String(256), nullable=False),
    Column("searcher_name", String(32), nullable=False),
    Column("searcher_state", JSON),  # None until the search starts
    Column("search_done", Boolean, nullable=False, default=False),
    Column("progress", Float, nullable=False, default=0.0),
    Column("start_time", DateTime(timezone=True), nullable=False),
    Column("end_time", DateTime(timezone=True)),
    Column("archived", Boolean, nullable=False, default=False),
    Column("error", Text),
    # The client's idempotency key: a retried `det experiment create` finds the experiment it made.
    Column("create_request_id", String(64)),
    UniqueConstraint("create_request_id", name="det_experiments_create_request_uq"),
    # Job queue overrides (`det job update`, `det e set`); None = the config's `resources` value.
    Column("priority", Integer),
    Column("weight", Float),
    Column("max_slots", Integer),
    # Place among jobs of the same priority (`--ahead-of`/`--behind-of`); None = the experiment id.
    Column("queue_position", Float),
    # The project it lives in (`det e move`); None: the Uncategorized project (master/projects.py).
    Column("project_id", Integer, index=True),
    # Markdown notes (Determined's experiment notes, `Experiment.set_notes`); None: none written yet.
    Column("notes", Text),
    # IDs are never reused (SQLite would otherwise hand out a deleted experiment's id again).
    sqlite_autoincrement=True,
)

trials = Table(
    "det_trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", Integer, ForeignKey("det_experiments.id", ondelete="CASCADE"), nullable=False),
    Column("request_id", Integer, nullable=False),
    Column("slot", Integer),
    Column("state", String(32), nullable=False),
    Column("hparams", JSON, nullable=False),
    Column("trial_seed", BigInteger, nullable=False),
    Column("start_time", DateTime(timezone=True)),
    Column("end_time", DateTime(timezone=True)),
    Column("total_batches", BigInteger, nullable=False, default=0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("run_id", Integer, nullable=False, default=0),  # increments each time the trial (re)starts
    Column("progress", Float, nullable=False, default=0.0),
    Column("latest_checkpoint", String(64)),
    Column("best_validation", Float),
    Column("best_validation_steps", BigInteger),
    Column("summary", JSON, nullable=False),  # latest metrics per group
    Column("token_hash", String(64)),
    Column("stop_requested", Boolean, nullable=False, default=False),
    # The search method paused it at a rung (promotion ASHA): it waits, holding no pool slot.
    Column("pause_requested", Boolean, nullable=False, default=False),
    Column("early_exit", String(32)),
    Column("op_completed", Boolean, nullable=False, default=False),
    Column("task", JSON),  # dag_id, run_id, task_id, map_index of the task running it
    # The run the admission gate last admitted (run_id + 1 until that run starts) and when.
    Column("admitted_run", Integer, nullable=False, default=0),
    Column("admitted_at", DateTime(timezone=True)),
    # When the queue asked the running trial to make room for a higher-priority job (None: not asked).
    Column("preempt_requested_at", DateTime(timezone=True)),
    # The run the master last answered "stop" (pause, kill, preemption): however the experiment's
    # state has moved since, that run's exit is a stop the master asked for, not the trial's end.
    Column("told_to_stop_run", Integer),
    # The worker host its admission placed it on (None: no hosts report, or not placed), and every
    # host its runs ran on, in order.
    Column("host", String(63)),
    Column("hosts", JSON),
    # A trial larger than every host: the nodes its admission placed it on, chief first, as
    # [{"host": id, "slots": n}, ...] (None: its gang is whole on ``host``).
    Column("nodes", JSON),
    UniqueConstraint("experiment_id", "request_id", name="det_trials_request_uq"),
    sqlite_autoincrement=True,
)

metrics = Table(
    "det_metrics",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("trial_id", Integer, ForeignKey("det_trials.id", ondelete="CASCADE"), nullable=False),
    Column("group", String(64), nullable=False),
    Column("steps_completed", BigInteger, nullable=False),
    Column("metrics", JSON, nullable=False),
    Column("report_time", DateTime(timezone=True), nullable=False),
    Column("trial_run_id", Integer, nullable=False),
    Index("det_metrics_trial_group", "trial_id", "group", "steps_completed"),
)

# The numbers of det_metrics again, for charts: each trial's series of one metric in chunks of
# packed float64 records (det_airflow.master.metric_points), written with the report.
metric_chunks = Table(
    "det_metric_chunks",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("trial_id", Integer, ForeignKey("det_trials.id", ondelete="CASCADE"), nullable=False),
    Column("group", String(64), nullable=False),
    Column("name", String(256), nullable=False),
    Column("points", LargeBinary, nullable=False),
    Index("det_metric_chunks_series", "trial_id", "group", "name", "id"),
)

checkpoints = Table(
    "det_checkpoints",
    metadata,
    Column("uuid", String(64), primary_key=True),
    Column("trial_id", Integer, ForeignKey("det_trials.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("experiment_id", Integer, nullable=False, index=True),
    Column("steps_completed", BigInteger, nullable=False),
    Column("state", String(32), nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("resources", JSON, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("storage", JSON, nullable=False),
    Column("report_time", DateTime(timezone=True), nullable=False),
    Column("validation_metric", Float),
)

trial_logs = Table(
    "det_trial_logs",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("trial_id", Integer, ForeignKey("det_trials.id", ondelete="CASCADE"), nullable=False),
    Column("timestamp", DateTime(timezone=True), nullable=False),
    Column("container_id", String(64)),
    Column("rank", Integer),
    Column("level", String(16)),
    Column("stdtype", String(16)),
    Column("message", Text, nullable=False),
    Column("source", String(16)),  # "task" (the trial's processes) or "master"; None: stored before 21
    Index("det_trial_logs_trial", "trial_id", "id"),
)

# Every state an experiment, trial or checkpoint took, when and why (written by master/lifecycle.py).
state_changes = Table(
    "det_state_changes",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("kind", String(16), nullable=False),  # experiment | trial | checkpoint
    Column("object_id", String(64), nullable=False),  # the experiment or trial id, the checkpoint uuid
    Column("from_state", String(32)),  # None when the object was created
    Column("to_state", String(32), nullable=False),
    Column("time", DateTime(timezone=True), nullable=False),
    Column("reason", Text, nullable=False),
    Index("det_state_changes_object", "kind", "object_id", "id"),
)

# The OS identity each experiment owner's trials run as (master/identities.py); gid == uid.
user_ids = Table(
    "det_user_ids",
    metadata,
    Column("username", String(256), primary_key=True),
    Column("uid", Integer, nullable=False, unique=True),
)

# The worker hosts (Determined's agents): what each one's heartbeat last reported.
hosts = Table(
    "det_hosts",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("slot_type", String(16), nullable=False),
    Column("slots", Integer, nullable=False),
    Column("devices", JSON, nullable=False),
    Column("queue", String(200), nullable=False),
    Column("address", String(253)),
    Column("registered_at", DateTime(timezone=True), nullable=False),
    Column("last_seen", DateTime(timezone=True), nullable=False),
)

# What an admin took out of service (`det agent|slot enable|disable`, master/host_switches.py): a
# row per host with some of it disabled, none when all is enabled. Apart from det_hosts, so that a
# host whose worker restarts (its det_hosts row goes and comes back) stays as the admin left it.
host_switches = Table(
    "det_host_switches",
    metadata,
    Column("host_id", String(63), primary_key=True),
    Column("enabled", Boolean, nullable=False),  # False: the whole host is disabled
    Column("draining", Boolean, nullable=False),  # disabled with --drain: what runs there finishes
    Column("disabled_slots", JSON, nullable=False),  # slot ids disabled one by one
    Column("changed_by", String(256), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
)

# Files to remove (checkpoints, trial work folders): queued by the master, removed by the host that
# has them (master/removals.py). No foreign key: a removal outlives its deleted experiment.
removals = Table(
    "det_removals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", Integer, nullable=False),
    Column("kind", String(16), nullable=False),  # "checkpoints" or "work_dir"
    Column("host", String(63)),  # the host whose disk has them; None: any host (shared storage)
    Column("pool", String(256)),  # the experiment's resource pool: its allowed roots
    Column("storage", JSON),  # the experiment's checkpoint_storage
    Column("uuids", JSON, nullable=False),
    Column("uid", Integer),  # the identity to remove as; None: the remover's own
    Column("gid", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("claimed_by", String(63)),
    Column("claimed_at", DateTime(timezone=True)),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("problem", Text),
)

# The nodes of a multi-node trial's current run (rank 0 is the chief, run by the trial's slot task;
# the others by the experiment's node tasks): where each runs, the chief's rendezvous address, and
# how far each got. Rows of an earlier run are replaced when the next run starts.
trial_nodes = Table(
    "det_trial_nodes",
    metadata,
    Column("trial_id", Integer, ForeignKey("det_trials.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("run_id", Integer, nullable=False),
    Column("host", String(63), nullable=False),
    Column("slots", Integer, nullable=False),
    Column("address", String(253)),
    Column("port", Integer),
    Column("state", String(16), nullable=False),  # waiting, running, exited
    Column("since", DateTime(timezone=True), nullable=False),  # when it entered its state
    Column("exit_code", Integer),
    Column("token_hash", String(64)),
    Column("task", JSON),
)

# Tasks beside experiments (Determined's notebooks, TensorBoards, commands and shells). Each runs as
# a one-trial experiment of its own (the queue, placement, runners, logs and DAG run are the trial's);
# this row says what kind of task it is and where its web server, once up, answers the proxy.
tasks = Table(
    "det_tasks",
    metadata,
    Column("id", Integer, ForeignKey("det_experiments.id", ondelete="CASCADE"), primary_key=True),
    Column("type", String(16), nullable=False, index=True),  # command | notebook | tensorboard | shell
    Column("config", JSON, nullable=False),  # the task's config as submitted (Determined's task fields)
    Column("args", JSON, nullable=False),  # what the task runs: argv, TensorBoard's sources
    # Its server (notebook, TensorBoard, shell) once up: where it listens and the secret it asks of
    # the proxy. None until the task reports it, and again once the task ended.
    Column("address", String(253)),
    Column("port", Integer),
    Column("secret", String(128)),
    Column("ready_at", DateTime(timezone=True)),
    Column("exit_code", Integer),
)

# Determined's config templates: named config fragments an experiment names (`--template`) and the
# master lays under the experiment's own config at creation (master/templates.py).
templates = Table(
    "det_templates",
    metadata,
    # Whose name it is: its owner's user name for a personal template, "" for a shared one (admins').
    Column("namespace", String(256), primary_key=True),
    Column("name", String(256), primary_key=True),
    Column("config", JSON, nullable=False),
    Column("owner", String(256), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Webhooks (Determined's `det webhook`): where to POST which events, and each event to deliver.
webhooks = Table(
    "det_webhooks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False, unique=True),
    Column("url", Text, nullable=False),
    Column("webhook_type", String(16), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("triggers", JSON, nullable=False),
    Column("signing_key", String(128), nullable=False),
    Column("owner", String(256), nullable=False),
    # A SPECIFIC webhook set by someone not an admin fires for this user's experiments only.
    Column("experiments_of", String(256)),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

webhook_deliveries = Table(
    "det_webhook_deliveries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("webhook_id", Integer, ForeignKey("det_webhooks.id", ondelete="CASCADE"), nullable=False),
    Column("trigger_type", String(32), nullable=False),
    Column("experiment_id", Integer),
    # Events that happen once per trial and trigger (a threshold crossed, a log line matched).
    Column("event_key", String(128)),
    Column("payload", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("delivered_at", DateTime(timezone=True)),
    Column("gave_up_at", DateTime(timezone=True)),
    Column("last_error", Text),
    Index("det_webhook_deliveries_due", "delivered_at", "gave_up_at", "next_attempt_at"),
    Index("det_webhook_deliveries_key", "webhook_id", "event_key"),
)

# Determined's model registry (master/models_registry.py): named models whose numbered versions are
# checkpoints. A version keeps its checkpoint: no cascade, so the checkpoint row outlives nothing.
models = Table(
    "det_models",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False),
    Column("description", Text, nullable=False),
    Column("notes", Text, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("owner", String(256), nullable=False),
    Column("archived", Boolean, nullable=False),
    Column("creation_time", DateTime(timezone=True), nullable=False),
    Column("last_updated_time", DateTime(timezone=True), nullable=False),
    # Its workspace (`det model move`); None: the Uncategorized workspace. A workspace that holds
    # models is not deleted (Determined: "move or delete models first").
    Column("workspace_id", Integer, ForeignKey("det_workspaces.id"), index=True),
    # Names are per owner: nobody can take, or shadow, the name of another's model.
    UniqueConstraint("owner", "name", name="det_models_owner_name_uq"),
    sqlite_autoincrement=True,
)

model_versions = Table(
    "det_model_versions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model_id", Integer, ForeignKey("det_models.id", ondelete="CASCADE"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("checkpoint_uuid", String(64), ForeignKey("det_checkpoints.uuid"), nullable=False, index=True),
    Column("name", Text, nullable=False),
    Column("comment", Text, nullable=False),
    Column("notes", Text, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("owner", String(256), nullable=False),
    Column("creation_time", DateTime(timezone=True), nullable=False),
    Column("last_updated_time", DateTime(timezone=True), nullable=False),
    UniqueConstraint("model_id", "version", name="det_model_versions_number_uq"),
    sqlite_autoincrement=True,
)

# Determined's Workspaces -> Projects -> Experiments (master/projects.py). Access follows the
# experiments' DAGs; a workspace or project only groups them.
workspaces = Table(
    "det_workspaces",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False, unique=True),
    Column("created_by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("archived", Boolean, nullable=False),
    sqlite_autoincrement=True,
)

projects = Table(
    "det_projects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("workspace_id", Integer, ForeignKey("det_workspaces.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(256), nullable=False),
    Column("description", Text, nullable=False),
    Column("notes", Text, nullable=False),  # Markdown, edited on the project's page
    Column("created_by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("archived", Boolean, nullable=False),
    UniqueConstraint("workspace_id", "name", name="det_projects_name_uq"),
    sqlite_autoincrement=True,
)

# Checkpoint uuids whose files a trial writes through the master (master/trial_storage.py): the
# first trial to write a uuid's file claims it, and only that trial may write or delete its files
# until it registers the checkpoint, which then never changes. Gone with the trial.
checkpoint_claims = Table(
    "det_checkpoint_claims",
    metadata,
    Column("uuid", String(64), primary_key=True),
    Column("trial_id", Integer, ForeignKey("det_trials.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("claimed_at", DateTime(timezone=True), nullable=False),
)

# Grants from the master's origin to a task's, each taken once (master/task_origin.py): a grant
# copied from a URL (a history, a log, a Referer) opens nothing once its browser took it. Rows go
# once their grant has expired.
used_grants = Table(
    "det_used_grants",
    metadata,
    Column("jti", String(64), primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
)

# Where experiments that name no workspace and project live, as in Determined.
UNCATEGORIZED = "Uncategorized"


def seed_uncategorized(conn: Connection) -> None:
    """The Uncategorized workspace and its Uncategorized project, made with the tables."""
    time = datetime.now(UTC)
    common: dict[str, Any] = {"created_by": "admin", "created_at": time, "archived": False}
    result = conn.execute(workspaces.insert().values(name=UNCATEGORIZED, **common))
    conn.execute(
        projects.insert().values(
            workspace_id=result.inserted_primary_key[0],  # type: ignore[index]
            name=UNCATEGORIZED,
            description="",
            notes="",
            **common,
        )
    )


@event.listens_for(projects, "after_create")
def _seed_on_create(_table: Table, conn: Connection, **_kw: Any) -> None:
    seed_uncategorized(conn)
