"""Unmanaged experiments: Determined's core_v2 runs, started by a program outside any trial, with
one trial and no DAG."""

from __future__ import annotations

import time
from typing import Any

import yaml
from sqlalchemy import Connection, Row, select

from det_airflow import runner_policy, settings
from det_airflow.config import ExperimentConfig, config_to_dict, merge_checkpoint_storage, parse_config
from det_airflow.master import experiments, lifecycle, projects, schema, submission
from det_airflow.master.lifecycle import NotFound, StateError, now
from det_airflow.states import ExperimentState, TrialState

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
        raw.get("checkpoint_storage"), submission.default_checkpoint_storage(current)
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
            project_id=projects.project_id_for(conn, cfg.workspace, cfg.project),
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
    experiments.maybe_finish(conn, experiment_id)


def finish_unmanaged(conn: Connection, trial_id: int, *, error: str | None) -> Row:
    """The unmanaged program ended: cleanly (``error`` None) or with an error. Returns the experiment."""
    trial = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).first()
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    exp = experiments.get_experiment(conn, trial.experiment_id, lock=True)
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
    experiments.maybe_finish(conn, exp.id)
    return experiments.get_experiment(conn, exp.id)
