"""Unmanaged experiments: a program started outside Airflow (``core_v2.init(unmanaged=True)``)
reports to the master as an experiment with one trial and no DAG.

A person creates it (the right to create DAG runs, as for any experiment) and gets the trial's
token; the program then reports through the same ``/runtime`` routes as training code on a trial,
and says here when it ends.
"""

from __future__ import annotations

import platform

from fastapi import APIRouter, Depends
from sqlalchemy import Connection, func, select

from det_airflow import settings
from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import (
    Empty,
    ExperimentAnswer,
    LogBatch,
    UnmanagedBody,
    UnmanagedExit,
    UnmanagedRunAnswer,
)
from det_airflow.master import (
    caps,
    experiments,
    lifecycle,
    projects,
    schema,
    serialize,
    trial_logs,
    trials,
    unmanaged,
)
from det_airflow.master.auth import CrossSiteGuard, TrialAuth, hash_token, new_token
from det_airflow.master.authz import CallerDep, check_create
from det_airflow.master.db import get_database
from det_airflow.states import TERMINAL_EXPERIMENT_STATES

router = APIRouter()


@router.post(
    "/experiments/unmanaged",
    response_model=UnmanagedRunAnswer,
    dependencies=[Depends(requires_authenticated()), CrossSiteGuard],
)
def create_unmanaged(body: UnmanagedBody, caller: CallerDep) -> dict:
    check_create(caller)
    config = dict(body.config)
    if body.hparams:
        config.setdefault("hyperparameters", body.hparams)
    cfg = unmanaged.unmanaged_config(config)
    token = new_token()
    with get_database().begin() as conn:
        _check_running_cap(conn, caller.name)
        projects.check_placement(conn, caller, cfg.workspace, cfg.project)
        experiment_id, trial_id = unmanaged.create_unmanaged(
            conn, cfg, owner=caller.name, hparams=body.hparams, token_hash=hash_token(token)
        )
        started = f"unmanaged run started by {caller.name}"
        if body.command:
            started += f": {body.command}"
        trial_logs.append_logs(conn, trial_id, [{"message": started, "container_id": platform.node()}])
        row = experiments.get_experiment(conn, experiment_id)
        trial = trials.get_trial(conn, trial_id)
        experiment = projects.experiment_answer(conn, row)
    return {
        "experiment": experiment,
        "trial": serialize.trial(trial),
        "token": token,
        "config": row.config,
    }


def _check_running_cap(conn: Connection, owner: str) -> None:
    """Refuse past ``max_unmanaged_experiments_per_user`` of the owner's unmanaged runs still running:
    each holds a trial token that may open long polls and write metrics."""
    cap = settings.load().max_unmanaged_experiments_per_user
    table = schema.experiments
    running = conn.execute(
        select(func.count())
        .select_from(table)
        .where(
            table.c.owner == owner,
            table.c.dag_id.is_(None),
            table.c.state.not_in([str(s) for s in TERMINAL_EXPERIMENT_STATES]),
        )
    ).scalar_one()
    if running >= cap:
        raise caps.too_many(
            owner, f"{running} unmanaged experiments running", cap, "max_unmanaged_experiments_per_user"
        )


@router.post("/runtime/trials/{trial_id}/unmanaged/exit", response_model=ExperimentAnswer)
def unmanaged_exit(trial_id: TrialAuth, body: UnmanagedExit) -> dict:
    with get_database().begin() as conn:
        row = unmanaged.finish_unmanaged(conn, trial_id, error=body.error)
        return {"experiment": projects.experiment_answer(conn, row)}


@router.post("/runtime/trials/{trial_id}/unmanaged/logs", response_model=Empty)
def unmanaged_logs(trial_id: TrialAuth, body: LogBatch) -> dict:
    """The program's own output. A managed trial's output comes only from its task (service
    token): training code may not write its trial's log."""
    with get_database().begin() as conn:
        trial = trials.get_trial(conn, trial_id)
        if not unmanaged.is_unmanaged(experiments.get_experiment(conn, trial.experiment_id)):
            raise lifecycle.StateError(
                f"trial {trial_id} belongs to a managed experiment; its task ships its output"
            )
        trial_logs.append_logs(conn, trial_id, [line.model_dump() for line in body.logs], source="task")
    return {}
