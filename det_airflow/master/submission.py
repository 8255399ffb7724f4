"""Submitting an experiment: its config checked and completed, its context checked, its record
stored (once per request id) with its staged DAG file, and a DAG run linked to it."""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row, select
from sqlalchemy.exc import IntegrityError

from det_airflow import runner_policy, settings
from det_airflow.config import ExperimentConfig, config_to_dict, merge_checkpoint_storage, parse_config
from det_airflow.context_archive import LIMITS, check_archive, format_size
from det_airflow.dagfactory import experiment_dag_id, staged_experiment_file, trial_slots_problem
from det_airflow.errors import ConfigError, ContextError, DetError
from det_airflow.master import (
    airflow_bridge,
    experiment_files,
    experiments,
    lifecycle,
    projects,
    schema,
    search,
)
from det_airflow.master.lifecycle import StateError, now
from det_airflow.master.limits import base64_length
from det_airflow.searcher import concurrent_slot_count
from det_airflow.states import ExperimentState

if TYPE_CHECKING:
    from det_airflow.master.db import Database


class SubmissionError(DetError):
    """An experiment cannot be accepted (HTTP 400); nothing is stored."""


def trial_pool(cfg: ExperimentConfig) -> str:
    """`resources.resource_pool` names the Airflow pool; else `airflow.pool` ([det] pool)."""
    return cfg.resources.resource_pool or cfg.airflow.pool


def default_checkpoint_storage(current: settings.Settings) -> dict[str, Any]:
    """The storage of an experiment that names none: airflow.cfg ``[det] checkpoint_storage_path``."""
    return {"type": "shared_fs", "host_path": str(current.checkpoint_root)}


def prepare_config(source: str | dict[str, Any], *, source_name: str | None = None) -> ExperimentConfig:
    """Validate a submitted config and fill what the master decides: storage and seed."""
    current = settings.load()
    cfg = parse_config(source, source_name=source_name, airflow_defaults=settings.airflow_defaults())
    raw = dict(cfg.raw)
    # Determined merges an experiment's storage settings over the cluster's default storage.
    raw["checkpoint_storage"] = merge_checkpoint_storage(
        raw.get("checkpoint_storage"), default_checkpoint_storage(current)
    )
    if cfg.experiment_seed is None:
        raw["reproducibility"] = {
            **(raw.get("reproducibility") or {}),
            "experiment_seed": int(time.time()) % 2**31,
        }
    cfg = parse_config(raw, source_name=source_name, airflow_defaults=settings.airflow_defaults())
    check_resources(cfg)
    runner_policy.enforce(config_to_dict(cfg), current)
    return cfg


def check_resources(cfg: ExperimentConfig) -> None:
    """Refuse what Airflow would accept and then hang on silently."""
    problems: list[tuple[str, str]] = []
    pool = trial_pool(cfg)
    field = "resources.resource_pool" if cfg.resources.resource_pool else "airflow.pool"
    slots = airflow_bridge.pool_slots(pool)
    if slots is None:
        problems.append(
            (
                field,
                f"Airflow pool '{pool}' does not exist (create it: airflow pools set {pool} SLOTS DESCRIPTION)",
            )
        )
    elif slots != -1 and cfg.resources.slots_per_trial > slots:
        problems.append(
            (
                "resources.slots_per_trial",
                f"{cfg.resources.slots_per_trial} slots per trial, but Airflow pool '{pool}' has only {slots} slots",
            )
        )
    if (problem := trial_slots_problem(cfg)) is not None:
        problems.append(problem)
    if problems:
        raise ConfigError(problems)


def create_once(
    db: Database,
    *,
    config_yaml: str,
    context: str | None,
    owner: str,
    paused: bool = False,
    parent_id: int | None = None,
    request_id: str | None = None,
    check_source: Callable[[Row], None] | None = None,
    after_create: Callable[[Connection, int], None] | None = None,
    check_pool: Callable[[str], None] | None = None,
    first_trials: Callable[[Database, int, int], dict[int, str]] | None = None,
) -> tuple[Row, bool]:
    """Validate and store a submitted experiment; returns it and whether it is new.

    The config is parsed before the context is even decoded, the cheap refusals first. With a
    ``request_id``, a retry (or a concurrent duplicate) answers the experiment the first one made.
    ``check_source`` is given the experiment a warm start reads from (``searcher.source_trial_id``
    or ``source_checkpoint_uuid``) and raises when the submitter may not read it: its trials will.
    ``after_create`` stores what goes with the experiment (a task's row) in its transaction;
    ``check_pool`` raises when the submitter may not use the experiment's pool; ``first_trials``
    (``trials.place_first_trials``) gives the trial slots of the run the master starts their first
    trials.
    """
    if request_id is not None and (existing := _created_for(db, request_id, owner)) is not None:
        return existing, False
    cfg = prepare_config(config_yaml)
    if check_pool is not None:
        check_pool(trial_pool(cfg))
    if check_source is not None:
        with db.read() as conn:
            source = warm_start_source(conn, cfg)
        if source is not None:
            check_source(source)
    archive = decode_context(context)
    # Under FAB, the role the experiment's DAG names must exist before a parse of its file; made
    # outside the experiment's transaction, which holds SQLite's one writer lock.
    airflow_bridge.ensure_owner_role(owner)
    try:
        with db.begin() as conn:
            experiment_id = create_experiment(
                conn,
                cfg,
                config_yaml=config_yaml,
                context=archive,
                owner=owner,
                paused=paused,
                parent_id=parent_id,
                request_id=request_id,
            )
            if after_create is not None:
                after_create(conn, experiment_id)
            row = experiments.get_experiment(conn, experiment_id)
    except IntegrityError:
        if request_id is None or (existing := _created_for(db, request_id, owner)) is None:
            raise
        return existing, False
    if row.dag_id is not None:
        queues = first_trials(db, experiment_id, trial_slots(cfg)) if first_trials is not None else None
        experiment_files.publish_submitted(db, experiment_id, queues)
    return row, True


def warm_start_source(conn: Connection, cfg: ExperimentConfig) -> Row | None:
    """The experiment whose checkpoint every trial of ``cfg`` starts from; None without a warm
    start, or when the source does not exist (its trials then start from scratch)."""
    searcher = cfg.searcher
    if searcher.source_checkpoint_uuid:
        c = schema.checkpoints.c
        query = select(c.experiment_id).where(c.uuid == searcher.source_checkpoint_uuid)
    elif searcher.source_trial_id is not None:
        query = select(schema.trials.c.experiment_id).where(schema.trials.c.id == searcher.source_trial_id)
    else:
        return None
    experiment_id = conn.execute(query).scalar()
    return None if experiment_id is None else experiments.get_experiment(conn, experiment_id)


def _created_for(db: Database, request_id: str, owner: str) -> Row | None:
    with db.read() as conn:
        row = conn.execute(
            select(schema.experiments).where(schema.experiments.c.create_request_id == request_id)
        ).first()
    if row is not None and row.owner != owner:
        raise StateError(f"request_id {request_id!r} was already used by another user; choose a new one")
    return row


def decode_context(data: str | None) -> bytes | None:
    """The context tar.gz from its base64 text, checked against the context limits."""
    if data is None:
        return None
    if len(data) > base64_length(LIMITS.archive_bytes):
        raise ContextError(
            f"context: the archive is {format_size(len(data) * 3 // 4)}, over the limit of "
            f"{format_size(LIMITS.archive_bytes)}"
        )
    try:
        archive = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ContextError("context: not valid base64") from None
    check_archive(archive)
    return archive


def create_experiment(
    conn: Connection,
    cfg: ExperimentConfig,
    *,
    config_yaml: str,
    context: bytes | None,
    owner: str,
    paused: bool = False,
    parent_id: int | None = None,
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    request_id: str | None = None,
) -> int:
    """Store an experiment; one created from the CLI also gets its own DAG file."""
    result = conn.execute(
        schema.experiments.insert().values(
            name=cfg.name,
            owner=owner,
            description=cfg.description,
            labels=list(cfg.labels),
            state=ExperimentState.PAUSED if paused else ExperimentState.ACTIVE,
            config=config_to_dict(cfg),
            config_yaml=config_yaml,
            context=context,
            dag_id=dag_id,
            dag_run_id=dag_run_id,
            parent_id=parent_id,
            resource_pool=trial_pool(cfg),
            searcher_name=cfg.searcher.name,
            searcher_state=None,
            search_done=False,
            progress=0.0,
            start_time=now(),
            archived=False,
            create_request_id=request_id,
            project_id=projects.project_id_for(conn, cfg.workspace, cfg.project),
        )
    )
    experiment_id = int(result.inserted_primary_key[0])  # type: ignore[index]
    lifecycle.experiment_created(
        conn,
        experiment_id,
        ExperimentState.PAUSED if paused else ExperimentState.ACTIVE,
        f"created by {owner}" + (", paused" if paused else ""),
    )
    if dag_id is None:
        conn.execute(
            schema.experiments.update()
            .where(schema.experiments.c.id == experiment_id)
            .values(dag_id=experiment_dag_id(experiment_id))
        )
        # Written inside the transaction (if the file cannot be written, nothing is stored), staged:
        # parses see it once its DAG is in Airflow's tables (publish_submitted).
        experiment_files.write_experiment_file(
            experiment_id,
            config_to_dict(cfg),
            staged_experiment_file(airflow_bridge.dags_folder(), experiment_id),
            submission=(owner, now(), trial_slots(cfg)),
        )
        if not paused:
            # Its trials are ready when its trial slots first ask.
            search.start(conn, experiments.get_experiment(conn, experiment_id))
    return experiment_id


def trial_slots(cfg: ExperimentConfig) -> int:
    """The trial slots the experiment's DAG maps: as many trials as its pool holds at once (the pool
    as it is now; a larger pool later does not add slots to a submitted experiment)."""
    return concurrent_slot_count(cfg, airflow_bridge.pool_slots(trial_pool(cfg)))


def register_run(
    conn: Connection,
    *,
    dag_id: str,
    run_id: str,
    experiment_id: int | None,
    config_yaml: str | None,
    context: bytes | None,
    owner: str,
) -> Row:
    """Link a DAG run to its experiment, creating the experiment for a YAML dropped into dags/."""
    if experiment_id is not None:
        row = experiments.get_experiment(conn, experiment_id, lock=True)
        if row.dag_run_id not in (None, run_id):
            raise StateError(
                f"experiment {experiment_id} already runs as DAG run '{row.dag_run_id}'; "
                "create a new experiment with `det experiment create` instead of re-triggering its DAG"
            )
        conn.execute(
            schema.experiments.update()
            .where(schema.experiments.c.id == experiment_id)
            .values(dag_run_id=run_id)
        )
        return experiments.get_experiment(conn, experiment_id)
    existing = conn.execute(
        select(schema.experiments).where(
            schema.experiments.c.dag_id == dag_id, schema.experiments.c.dag_run_id == run_id
        )
    ).first()
    if existing is not None:  # the register task was retried
        return existing
    if config_yaml is None:
        raise SubmissionError("register needs the experiment config")
    cfg = prepare_config(config_yaml, source_name=dag_id)
    if context is not None:
        check_archive(context)
    new_id = create_experiment(
        conn, cfg, config_yaml=config_yaml, context=context, owner=owner, dag_id=dag_id, dag_run_id=run_id
    )
    return experiments.get_experiment(conn, new_id)
