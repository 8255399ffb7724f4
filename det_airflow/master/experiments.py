"""Experiments: submission checks, creation, lifecycle changes and the end of a run."""

from __future__ import annotations

import functools
import os
import time
from datetime import UTC, datetime
from typing import Any

import yaml
from sqlalchemy import Connection, Row, func, select

from det_airflow.config import ExperimentConfig, config_to_dict, parse_config
from det_airflow.dagfactory import (
    airflow_section_defaults,
    experiment_dag_id,
    experiment_file,
    trial_slots_problem,
)
from det_airflow.errors import ConfigError, DetError
from det_airflow.master import airflow_bridge, schema
from det_airflow.states import ExperimentState, TrialState


class SubmissionError(DetError):
    """An experiment cannot be accepted (HTTP 400); nothing is stored."""


class StateError(DetError):
    """The experiment is not in a state that allows the request (HTTP 409)."""


class NotFound(DetError):
    """No such object (HTTP 404)."""


def now() -> datetime:
    return datetime.now(UTC)


def trial_pool(cfg: ExperimentConfig) -> str:
    """`resources.resource_pool` names the Airflow pool; else `airflow.pool` ([det] pool)."""
    return cfg.resources.resource_pool or cfg.airflow.pool


def default_checkpoint_storage() -> dict[str, Any]:
    path = airflow_bridge.det_defaults().get("checkpoint_storage_path") or os.path.join(
        os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "det-checkpoints"
    )
    return {"type": "shared_fs", "host_path": os.path.abspath(os.path.expanduser(path))}


def prepare_config(source: str | dict[str, Any], *, source_name: str | None = None) -> ExperimentConfig:
    """Validate a submitted config and fill what the master decides: storage and seed."""
    cfg = parse_config(source, source_name=source_name, airflow_defaults=airflow_section_defaults())
    raw = dict(cfg.raw)
    if cfg.checkpoint_storage is None:
        raw["checkpoint_storage"] = default_checkpoint_storage()
    if cfg.experiment_seed is None:
        raw["reproducibility"] = {
            **(raw.get("reproducibility") or {}),
            "experiment_seed": int(time.time()) % 2**31,
        }
    cfg = parse_config(raw, source_name=source_name, airflow_defaults=airflow_section_defaults())
    check_resources(cfg)
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
        )
    )
    experiment_id = int(result.inserted_primary_key[0])  # type: ignore[index]
    if dag_id is None:
        conn.execute(
            schema.experiments.update()
            .where(schema.experiments.c.id == experiment_id)
            .values(dag_id=experiment_dag_id(experiment_id))
        )
        # Written inside the transaction: if the file cannot be written, nothing is stored.
        write_experiment_file(experiment_id, config_to_dict(cfg))
    return experiment_id


def write_experiment_file(experiment_id: int, config: dict[str, Any]) -> None:
    path = experiment_file(airflow_bridge.dags_folder(), experiment_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        f"# Experiment {experiment_id}, written by the det master. Do not edit.\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
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
    allowed, target = _TRANSITIONS[action]
    state = ExperimentState(row.state)
    if state == target:
        return
    if state not in allowed:
        raise StateError(f"experiment {experiment_id} is {state}; cannot {action} it")
    conn.execute(table.update().where(table.c.id == experiment_id).values(state=target))
    if target in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        # Trials that never started will not start now.
        conn.execute(
            schema.trials.update()
            .where(
                schema.trials.c.experiment_id == experiment_id,
                schema.trials.c.state.in_([TrialState.QUEUED, TrialState.PAUSED]),
            )
            .values(state=TrialState.CANCELED, end_time=now(), token_hash=None)
        )
        conn.execute(table.update().where(table.c.id == experiment_id).values(search_done=True))
        maybe_finish(conn, experiment_id)


def delete_experiment(conn: Connection, experiment_id: int) -> None:
    row = get_experiment(conn, experiment_id, lock=True)
    if not ExperimentState(row.state).is_terminal:
        raise StateError(f"experiment {experiment_id} is {row.state}; cancel or kill it before deleting")
    trial_ids = select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
    for table in (schema.trial_logs, schema.metrics, schema.checkpoints):
        conn.execute(table.delete().where(table.c.trial_id.in_(trial_ids)))
    conn.execute(schema.trials.delete().where(schema.trials.c.experiment_id == experiment_id))
    conn.execute(schema.experiments.delete().where(schema.experiments.c.id == experiment_id))
    experiment_file(airflow_bridge.dags_folder(), experiment_id).unlink(missing_ok=True)


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
    values: dict[str, Any] = {"state": final, "end_time": now()}
    if final == ExperimentState.COMPLETED:
        values["progress"] = 1.0
    conn.execute(schema.experiments.update().where(schema.experiments.c.id == experiment_id).values(**values))


def finalize(conn: Connection, experiment_id: int) -> tuple[Row, str | None]:
    """Called when the DAG run's trial tasks are all done: settle whatever is still open."""
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
            conn.execute(
                schema.trials.update()
                .where(schema.trials.c.id.in_(open_trials))
                .values(state=TrialState.ERROR, end_time=now(), token_hash=None)
            )
            values: dict[str, Any] = {"search_done": True}
            if not row.search_done and row.state in (ExperimentState.ACTIVE, ExperimentState.PAUSED):
                values["error"] = row.error or "the experiment's tasks ended before its search finished"
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
