"""Experiments: submission checks, creation, lifecycle changes and the end of a run."""

from __future__ import annotations

import base64
import binascii
import functools
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from sqlalchemy import Connection, Row, func, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from det_airflow import runner_policy, settings
from det_airflow.config import ExperimentConfig, config_to_dict, merge_checkpoint_storage, parse_config
from det_airflow.context_archive import LIMITS, check_archive, format_size
from det_airflow.dagfactory import (
    FINISHED_SUBDIR,
    dag_id_for_file,
    experiment_dag_id,
    experiment_file,
    retire_experiment_file,
    staged_experiment_file,
    submission_header,
    trial_slots_problem,
)
from det_airflow.errors import ConfigError, ContextError, DetError
from det_airflow.master import airflow_bridge, lifecycle, schema
from det_airflow.master.lifecycle import NotFound, StateError, now
from det_airflow.master.limits import base64_length
from det_airflow.searcher import concurrent_slot_count
from det_airflow.states import ExperimentState, TrialState

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


@functools.lru_cache(maxsize=256)
def _cached_config(experiment_id: int, frozen: str) -> ExperimentConfig:
    import json

    return parse_config(json.loads(frozen))


def experiment_config(row: Row) -> ExperimentConfig:
    """The typed config of a stored experiment (parsed once per process)."""
    import json

    return _cached_config(row.id, json.dumps(row.config, sort_keys=True))


def get_experiment(conn: Connection, experiment_id: int, *, lock: bool = False) -> Row:
    query = select(schema.experiments).where(schema.experiments.c.id == experiment_id)
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return row


def count_trials(conn: Connection, experiment_id: int) -> int:
    return conn.execute(
        select(func.count()).select_from(schema.trials).where(schema.trials.c.experiment_id == experiment_id)
    ).scalar_one()


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
) -> tuple[Row, bool]:
    """Validate and store a submitted experiment; returns it and whether it is new.

    The config is parsed before the context is even decoded, the cheap refusals first. With a
    ``request_id``, a retry (or a concurrent duplicate) answers the experiment the first one made.
    ``check_source`` is given the experiment a warm start reads from (``searcher.source_trial_id``
    or ``source_checkpoint_uuid``) and raises when the submitter may not read it: its trials will.
    """
    if request_id is not None and (existing := _created_for(db, request_id, owner)) is not None:
        return existing, False
    cfg = prepare_config(config_yaml)
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
            row = get_experiment(conn, experiment_id)
    except IntegrityError:
        if request_id is None or (existing := _created_for(db, request_id, owner)) is None:
            raise
        return existing, False
    if row.dag_id is not None:
        publish_submitted(experiment_id)
    return row, True


# A staged file older than this was left by an API server that stopped between a create's commit
# and its publication (which takes well under a second).
_STAGED_LEFT_AFTER_SECONDS = 60.0


def publish_left_staged() -> list[int]:
    """Publish experiments whose staged file an API server left behind; answers their ids."""
    folder = airflow_bridge.dags_folder()
    published = []
    for staged in experiment_file(folder, 0).parent.glob(".exp_*.yaml"):
        file = dag_id_for_file(staged.with_name(staged.name[1:]), folder)
        try:
            left = time.time() - staged.stat().st_mtime > _STAGED_LEFT_AFTER_SECONDS
        except FileNotFoundError:
            continue  # published meanwhile
        if file.experiment_id is not None and left:
            publish_submitted(file.experiment_id)
            published.append(file.experiment_id)
    return published


def publish_submitted(experiment_id: int) -> None:
    """Once a created experiment is committed: its DAG into Airflow's tables, then its staged file
    where parses find it. In that order, the DAG processor only ever updates the DAG the master
    wrote; the two never race to insert it (a lost race stops Airflow's DAG processor)."""
    folder = airflow_bridge.dags_folder()
    staged = staged_experiment_file(folder, experiment_id)
    published = airflow_bridge.publish_experiment_dag(experiment_id, staged)
    os.replace(staged, experiment_file(folder, experiment_id))
    if not published:
        airflow_bridge.request_reparse()


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
    return None if experiment_id is None else get_experiment(conn, experiment_id)


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
        write_experiment_file(
            experiment_id,
            config_to_dict(cfg),
            staged_experiment_file(airflow_bridge.dags_folder(), experiment_id),
            submission=(owner, now(), trial_slots(cfg)),
        )
        if not paused:
            _start_search(conn, experiment_id)  # its trials are ready when its trial slots first ask
    return experiment_id


def _start_search(conn: Connection, experiment_id: int) -> None:
    from det_airflow.master import search  # the search reads experiments: imported at use

    search.start(conn, get_experiment(conn, experiment_id))


def trial_slots(cfg: ExperimentConfig) -> int:
    """The trial slots the experiment's DAG maps: as many trials as its pool holds at once (the pool
    as it is now; a larger pool later does not add slots to a submitted experiment)."""
    return concurrent_slot_count(cfg, airflow_bridge.pool_slots(trial_pool(cfg)))


# The experiment files in the DAGs folder and their folders: the master's user and group only.
EXPERIMENT_FILE_MODE = 0o640
EXPERIMENT_DIR_MODE = 0o750


def write_experiment_file(
    experiment_id: int,
    config: dict[str, Any],
    path: Path | None = None,
    *,
    submission: tuple[str, datetime, int | None] | None = None,
) -> None:
    """The file the DAG factory compiles (or ``path``, e.g. its retired copy). Secrets are masked: the
    DAGs folder is readable by every Airflow component and often by people, and trials get the full
    config from the master. `submission` (owner, time, trial slots) becomes the DAG's owner, run date
    and number of trial slots."""
    from det_airflow.master.serialize import masked_config

    path = path or experiment_file(airflow_bridge.dags_folder(), experiment_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=EXPERIMENT_DIR_MODE)
    # Other local users (trials run as their own uids) have no business reading configs: the DAG
    # processor runs as the master's uid (or its group), so owner and group are enough.
    os.chmod(path.parent, EXPERIMENT_DIR_MODE)
    tmp = path.with_name(path.name + ".tmp")
    text = (
        f"# Experiment {experiment_id}, written by the det master. Do not edit.\n"
        + (submission_header(*submission) if submission else "")
        + yaml.safe_dump(masked_config(config), sort_keys=False)
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, EXPERIMENT_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), EXPERIMENT_FILE_MODE)
        f.write(text)
    os.replace(tmp, path)


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
        row = get_experiment(conn, experiment_id, lock=True)
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
        return get_experiment(conn, experiment_id)
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
    return get_experiment(conn, new_id)


_TRANSITIONS: dict[str, tuple[set[ExperimentState], ExperimentState]] = {
    "pause": ({ExperimentState.ACTIVE}, ExperimentState.PAUSED),
    "activate": ({ExperimentState.PAUSED}, ExperimentState.ACTIVE),
    "cancel": ({ExperimentState.ACTIVE, ExperimentState.PAUSED}, ExperimentState.STOPPING_CANCELED),
    "kill": (
        {ExperimentState.ACTIVE, ExperimentState.PAUSED, ExperimentState.STOPPING_CANCELED},
        ExperimentState.STOPPING_KILLED,
    ),
}


def change_state(conn: Connection, experiment_id: int, action: str) -> None:
    """pause / activate / cancel / kill / archive / unarchive."""
    row = get_experiment(conn, experiment_id, lock=True)
    table = schema.experiments
    if action in ("archive", "unarchive"):
        if action == "archive" and not ExperimentState(row.state).is_terminal:
            raise StateError(
                f"experiment {experiment_id} is {row.state}; only finished experiments can be archived"
            )
        conn.execute(table.update().where(table.c.id == experiment_id).values(archived=action == "archive"))
        return
    refuse_dag_action(row, action)
    allowed, target = _TRANSITIONS[action]
    state = ExperimentState(row.state)
    if state == target:
        return
    if state not in allowed:
        raise StateError(f"experiment {experiment_id} is {state}; cannot {action} it")
    lifecycle.move_experiment(conn, row, target, f"det experiment {action}")
    if target == ExperimentState.ACTIVE and row.searcher_state is None and not is_unmanaged(row):
        _start_search(conn, experiment_id)  # created paused: its search starts now
    if target in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        # Trials that never started will not start now.
        lifecycle.move_trials(
            conn,
            (schema.trials.c.experiment_id == experiment_id)
            & schema.trials.c.state.in_([TrialState.QUEUED, TrialState.PAUSED]),
            TrialState.CANCELED,
            f"its experiment was {'canceled' if action == 'cancel' else 'killed'} before it ran",
            end_time=now(),
            token_hash=None,
        )
        conn.execute(table.update().where(table.c.id == experiment_id).values(search_done=True))
        if is_unmanaged(row):
            end_unmanaged_trials(conn, experiment_id)
        maybe_finish(conn, experiment_id)


def delete_experiment(db: Database, experiment_id: int) -> list[str]:
    """Remove an ended experiment and everything it owned; returns what could not be removed.

    Files and Airflow's records go first and the rows last, so after a failure part way the
    experiment is still listed and the delete can be run again.
    """
    with db.read() as conn:
        row = get_experiment(conn, experiment_id)
        checkpoints = conn.execute(
            select(schema.checkpoints.c.uuid, schema.checkpoints.c.storage).where(
                schema.checkpoints.c.experiment_id == experiment_id
            )
        ).all()
    if not ExperimentState(row.state).is_terminal:
        raise StateError(f"experiment {experiment_id} is {row.state}; cancel or kill it before deleting it")
    own_dag = row.dag_id == experiment_dag_id(row.id)
    # Its own DAG may have a run it never registered (killed first); a shared DAG, only its run.
    running = (
        airflow_bridge.running_dag_runs(row.dag_id, None if own_dag else row.dag_run_id)
        if own_dag or (row.dag_id and row.dag_run_id)
        else []
    )
    if running:
        raise StateError(
            f"experiment {experiment_id} is {row.state}, but its DAG run '{running[0]}' of DAG "
            f"'{row.dag_id}' is still running in Airflow; delete the experiment once that run has ended"
        )
    from det_airflow.master import file_cleanup

    with db.begin() as conn:
        identity = file_cleanup.owner_identity(conn, row.owner)
    work_dir = settings.load().trial_work_dir
    not_removed = [
        *_remove_airflow_records(row),
        *file_cleanup.remove_checkpoints(row, checkpoints, identity),
        *_remove_optuna_study(row),
        # The platform names this folder and made it (root-owned when the worker is root).
        *file_cleanup.remove_tree(
            work_dir / f"exp_{experiment_id}", [work_dir], "trial work directory", identity=None
        ),
    ]
    with db.begin() as conn:
        get_experiment(conn, experiment_id, lock=True)
        trial_ids = select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
        lifecycle.forget(conn, "experiment", [experiment_id])
        lifecycle.forget(conn, "trial", conn.execute(trial_ids).scalars().all())
        lifecycle.forget(conn, "checkpoint", [uuid for uuid, _ in checkpoints])
        for table in (schema.trial_logs, schema.metrics, schema.checkpoints):
            conn.execute(table.delete().where(table.c.trial_id.in_(trial_ids)))
        conn.execute(schema.trials.delete().where(schema.trials.c.experiment_id == experiment_id))
        conn.execute(schema.experiments.delete().where(schema.experiments.c.id == experiment_id))
    return not_removed


def maybe_finish(conn: Connection, experiment_id: int) -> None:
    """Close the experiment once the search is over and every trial is closed."""
    row = get_experiment(conn, experiment_id)
    if ExperimentState(row.state).is_terminal or not row.search_done:
        return
    states = [
        TrialState(s)
        for s in conn.execute(
            select(schema.trials.c.state).where(schema.trials.c.experiment_id == experiment_id)
        ).scalars()
    ]
    if any(not s.is_terminal for s in states):
        return
    if row.state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        final = ExperimentState.CANCELED
    elif row.error or (states and all(s == TrialState.ERROR for s in states)):
        final = ExperimentState.ERROR
    else:
        final = ExperimentState.COMPLETED
    values: dict[str, Any] = {"end_time": now()}
    if final == ExperimentState.COMPLETED:
        values["progress"] = 1.0
    reason = row.error if final == ExperimentState.ERROR and row.error else "its search and every trial ended"
    lifecycle.move_experiment(conn, row, final, reason, **values)


def finalize(conn: Connection, experiment_id: int, *, why: str | None = None) -> tuple[Row, str | None]:
    """Called when the DAG run's trial tasks are all done: settle whatever is still open (``why``:
    what ended them, when not the tasks themselves)."""
    row = get_experiment(conn, experiment_id, lock=True)
    if not ExperimentState(row.state).is_terminal:
        open_trials = (
            conn.execute(
                select(schema.trials.c.id).where(
                    schema.trials.c.experiment_id == experiment_id,
                    schema.trials.c.state.not_in([s.value for s in TrialState if s.is_terminal]),
                )
            )
            .scalars()
            .all()
        )
        if open_trials or not row.search_done:
            # Their tasks ended without reporting (killed, or failed before the trial started).
            lifecycle.move_trials(
                conn,
                schema.trials.c.id.in_(open_trials),
                TrialState.ERROR,
                why or "its Airflow task ended without reporting the trial's exit",
                end_time=now(),
                token_hash=None,
            )
            values: dict[str, Any] = {"search_done": True}
            if not row.search_done and row.state in (ExperimentState.ACTIVE, ExperimentState.PAUSED):
                values["error"] = (
                    row.error or why or "the experiment's tasks ended before its search finished"
                )
            conn.execute(
                schema.experiments.update().where(schema.experiments.c.id == experiment_id).values(**values)
            )
        maybe_finish(conn, experiment_id)
    cfg = experiment_config(row)
    order = schema.checkpoints.c.validation_metric
    best = conn.execute(
        select(schema.checkpoints.c.uuid)
        .where(
            schema.checkpoints.c.experiment_id == experiment_id,
            schema.checkpoints.c.state == "COMPLETED",
            schema.checkpoints.c.validation_metric.is_not(None),
        )
        .order_by(order.asc() if cfg.searcher.smaller_is_better else order.desc())
        .limit(1)
    ).scalar()
    return get_experiment(conn, experiment_id), best


def _remove_airflow_records(row: Row) -> list[str]:
    """The experiment's own DAG (`det experiment create`), or only its run of a shared DAG."""
    try:
        if row.dag_id == experiment_dag_id(row.id):
            path = experiment_file(airflow_bridge.dags_folder(), row.id)
            retired = path.parent / FINISHED_SUBDIR / path.name
            try:
                # First, or the DAG processor would bring the DAG back from the file.
                path.unlink(missing_ok=True)
                retired.unlink(missing_ok=True)
            except OSError as exc:
                return [f"experiment file {path}: {exc.strerror or exc}; so its DAG '{row.dag_id}' was kept"]
            airflow_bridge.delete_dag(row.dag_id)
        elif row.dag_id and row.dag_run_id:
            # A YAML under dags/ is the user's: its DAG stays for the runs it still has.
            airflow_bridge.delete_dag_run(row.dag_id, row.dag_run_id)
    except airflow_bridge.AirflowRecordError as exc:
        return [str(exc)]
    return []


def _remove_optuna_study(row: Row) -> list[str]:
    from det_airflow.master import search

    if experiment_config(row).searcher.sampler == "random":
        return []  # random sampling keeps no optuna study
    try:
        search.delete_study(row.id)
    except SQLAlchemyError as exc:
        return [f"optuna study '{search.study_name(row.id)}': {exc.__class__.__name__}: {exc}"]
    return []


def retire_finished_experiment_files(conn: Connection) -> list[int]:
    """Move the configs of experiments whose DAG run has ended out of the parsed DAGs folder.

    Parsing then grows with the experiments still to run, not with every experiment ever created
    (benchmarks/dag_parse.py). Only after the run has ended: its last tasks need the DAG.
    Returns the ids retired.
    """
    folder = airflow_bridge.dags_folder()
    candidates: dict[int, Path] = {}
    for path in experiment_file(folder, 0).parent.glob("exp_*.yaml"):
        file = dag_id_for_file(path, folder)
        if file.experiment_id is not None:
            candidates[file.experiment_id] = path
    if not candidates:
        return []
    rows = conn.execute(
        select(
            schema.experiments.c.id,
            schema.experiments.c.state,
            schema.experiments.c.dag_id,
            schema.experiments.c.dag_run_id,
        ).where(schema.experiments.c.id.in_(list(candidates)))
    ).all()
    ended = [r for r in rows if ExperimentState(r.state).is_terminal and r.dag_run_id]
    finished = airflow_bridge.finished_dag_runs([(r.dag_id, r.dag_run_id) for r in ended])
    retired = []
    for r in ended:
        if (r.dag_id, r.dag_run_id) in finished and retire_experiment_file(folder, r.id) is not None:
            retired.append(int(r.id))
    return retired


def forget_deleted_experiment_dags(conn: Connection) -> list[str]:
    """Delete the DAGs of deleted experiments that Airflow registered again; returns their ids.

    A parse of the DAG processor that began before `det e delete` removed the experiment's file
    can finish after the delete removed its DAG, and register the DAG once more: stale, with no
    runs. Only such DAGs (experiment DAG id, no experiment row, stale, no run) are removed.
    """
    prefix = experiment_dag_id(0).removesuffix("0")
    candidates: dict[int, str] = {}
    for dag_id in airflow_bridge.stale_dags_without_runs(prefix):
        number = dag_id.removeprefix(prefix)
        if number.isdigit():
            candidates[int(number)] = dag_id
    if not candidates:
        return []
    kept = set(
        conn.execute(
            select(schema.experiments.c.id).where(schema.experiments.c.id.in_(list(candidates)))
        ).scalars()
    )
    forgotten = []
    for experiment_id, dag_id in sorted(candidates.items()):
        if experiment_id not in kept:
            airflow_bridge.delete_dag(dag_id)
            forgotten.append(dag_id)
    return forgotten


# --- unmanaged experiments (Determined's core_v2 runs started outside any trial) ------------------

# Unmanaged runs take no Airflow pool slot: their experiments stand in a pool of their own, which
# no Airflow pool is, so the job queue never counts them against a real pool's slots.
UNMANAGED_POOL = "unmanaged"
# No entrypoint the master could run, and no slots.
_UNMANAGED_DEFAULTS: dict[str, Any] = {
    "entrypoint": "unmanaged",
    "resources": {"slots_per_trial": 0},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
}


def is_unmanaged(row: Row) -> bool:
    """An unmanaged experiment is the one kind never linked to a DAG."""
    return row.dag_id is None


def unmanaged_config(given: dict[str, Any]) -> ExperimentConfig:
    """The config of an unmanaged run: the program's settings over the unmanaged defaults."""
    current = settings.load()
    raw = {**_UNMANAGED_DEFAULTS, **given}
    raw["checkpoint_storage"] = merge_checkpoint_storage(
        raw.get("checkpoint_storage"), default_checkpoint_storage(current)
    )
    if raw.get("reproducibility", {}).get("experiment_seed") is None:
        raw["reproducibility"] = {
            **(raw.get("reproducibility") or {}),
            "experiment_seed": int(time.time()) % 2**31,
        }
    cfg = parse_config(raw, source_name="unmanaged experiment", airflow_defaults=settings.airflow_defaults())
    # Its checkpoints land in its storage's host path, which the master later reads and deletes.
    runner_policy.enforce(config_to_dict(cfg), current)
    return cfg


def create_unmanaged(
    conn: Connection, cfg: ExperimentConfig, *, owner: str, hparams: dict[str, Any], token_hash: str
) -> tuple[int, int]:
    """Store an unmanaged experiment with its one running trial; returns (experiment id, trial id)."""
    config = config_to_dict(cfg)
    result = conn.execute(
        schema.experiments.insert().values(
            name=cfg.name,
            owner=owner,
            description=cfg.description,
            labels=list(cfg.labels),
            state=ExperimentState.ACTIVE,
            config=config,
            config_yaml=yaml.safe_dump(cfg.raw, sort_keys=False),
            context=None,
            dag_id=None,
            dag_run_id=None,
            resource_pool=UNMANAGED_POOL,
            searcher_name=cfg.searcher.name,
            searcher_state=None,
            search_done=True,  # no search: the program is the one trial
            progress=0.0,
            start_time=now(),
            archived=False,
        )
    )
    experiment_id = int(result.inserted_primary_key[0])  # type: ignore[index]
    lifecycle.experiment_created(conn, experiment_id, ExperimentState.ACTIVE, f"unmanaged run of {owner}")
    trial = conn.execute(
        schema.trials.insert().values(
            experiment_id=experiment_id,
            request_id=1,
            slot=0,
            state=TrialState.RUNNING,
            hparams=hparams,
            trial_seed=cfg.experiment_seed or 0,
            start_time=now(),
            run_id=1,
            admitted_run=1,
            summary={},
            token_hash=token_hash,
        )
    )
    trial_id = int(trial.inserted_primary_key[0])  # type: ignore[index]
    lifecycle.trial_created(conn, trial_id, TrialState.RUNNING, "the unmanaged program started")
    return experiment_id, trial_id


def refuse_dag_action(row: Row, action: str) -> None:
    """Pause and activate act through the experiment's DAG, which an unmanaged one does not have."""
    if is_unmanaged(row) and action in ("pause", "activate"):
        raise StateError(
            f"experiment {row.id} is unmanaged (its program runs outside Airflow, with no DAG); "
            f"it cannot be {action}d: kill it, or stop its program"
        )


def end_unmanaged_trials(conn: Connection, experiment_id: int) -> None:
    """A killed unmanaged experiment ends at once: no task will report its program's exit.

    The trial keeps its token so the program, still running, hears ``should_preempt()`` and can
    report its last metrics before it stops.
    """
    lifecycle.move_trials(
        conn,
        (schema.trials.c.experiment_id == experiment_id)
        & schema.trials.c.state.not_in([s.value for s in TrialState if s.is_terminal]),
        TrialState.CANCELED,
        "its unmanaged experiment was killed",
        end_time=now(),
    )
    maybe_finish(conn, experiment_id)


def finish_unmanaged(conn: Connection, trial_id: int, *, error: str | None) -> Row:
    """The unmanaged program ended: cleanly (``error`` None) or with an error. Returns the experiment."""
    trial = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).first()
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    exp = get_experiment(conn, trial.experiment_id, lock=True)
    if not is_unmanaged(exp):
        raise StateError(f"trial {trial_id} belongs to a managed experiment; its task reports its exit")
    if TrialState(trial.state).is_terminal:
        conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(token_hash=None))
    else:
        if error is not None:
            state = TrialState.ERROR
        elif trial.state == TrialState.STOPPING_KILLED:
            state = TrialState.CANCELED
        else:
            state = TrialState.COMPLETED
        reason = (
            f"the unmanaged program failed: {error}" if error is not None else "the unmanaged program ended"
        )
        lifecycle.move_trial(conn, trial, state, reason, end_time=now(), token_hash=None)
    if error is not None and not ExperimentState(exp.state).is_terminal:
        conn.execute(schema.experiments.update().where(schema.experiments.c.id == exp.id).values(error=error))
    maybe_finish(conn, exp.id)
    return get_experiment(conn, exp.id)
