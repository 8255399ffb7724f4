"""Routes for people (CLI and UI): an Airflow login is required."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import get_user, requires_authenticated
from fastapi import APIRouter, Depends, Query, Response
from sqlalchemy import select

from det_airflow.errors import ContextError
from det_airflow.master import airflow_bridge, experiments, schema, serialize, trials
from det_airflow.master.bodies import CreateExperiment
from det_airflow.master.db import get_database

# Every route needs an Airflow login: the master runs inside Airflow's API server.
router = APIRouter(dependencies=[Depends(requires_authenticated())])


def _username(user: Annotated[Any, Depends(get_user)]) -> str:
    return str(user.get_name())


Username = Annotated[str, Depends(_username)]


def decode_context(data: str | None) -> bytes | None:
    if data is None:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ContextError("context: not valid base64") from None


@router.post("/experiments")
def create_experiment(body: CreateExperiment, owner: Username) -> dict:
    context = decode_context(body.context)
    cfg = experiments.prepare_config(body.config)
    db = get_database()
    with db.begin() as conn:
        experiment_id = experiments.create_experiment(
            conn,
            cfg,
            config_yaml=body.config,
            context=context,
            owner=owner,
            paused=body.paused,
            parent_id=body.parent_id,
        )
        row = experiments.get_experiment(conn, experiment_id)
    airflow_bridge.request_reparse()
    return {"experiment": serialize.experiment(row, num_trials=0)}


@router.get("/experiments")
def list_experiments(all: bool = False) -> dict:  # noqa: A002 - the CLI's flag name
    table = schema.experiments
    query = select(table).order_by(table.c.id)
    if not all:
        query = query.where(table.c.archived.is_(False))
    with get_database().read() as conn:
        rows = conn.execute(query).all()
        return {
            "experiments": [
                serialize.experiment(r, num_trials=experiments.count_trials(conn, r.id)) for r in rows
            ]
        }


def _trials_of(conn, experiment_id: int) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = conn.execute(
        select(schema.trials)
        .where(schema.trials.c.experiment_id == experiment_id)
        .order_by(schema.trials.c.id)
    ).all()
    return [serialize.trial(r) for r in rows]


@router.get("/experiments/{experiment_id}")
def describe_experiment(experiment_id: int) -> dict:
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
        trial_list = _trials_of(conn, experiment_id)
    return {
        "experiment": serialize.experiment(row, num_trials=len(trial_list)),
        "trials": trial_list,
        "config": row.config,
    }


@router.get("/experiments/{experiment_id}/config")
def experiment_config(experiment_id: int) -> dict:
    with get_database().read() as conn:
        return {"config": experiments.get_experiment(conn, experiment_id).config}


@router.get("/experiments/{experiment_id}/trials")
def experiment_trials(experiment_id: int) -> dict:
    with get_database().read() as conn:
        experiments.get_experiment(conn, experiment_id)
        return {"trials": _trials_of(conn, experiment_id)}


@router.get("/experiments/{experiment_id}/checkpoints")
def experiment_checkpoints(experiment_id: int) -> dict:
    table = schema.checkpoints
    with get_database().read() as conn:
        experiments.get_experiment(conn, experiment_id)
        rows = conn.execute(
            select(table)
            .where(table.c.experiment_id == experiment_id)
            .order_by(table.c.trial_id, table.c.steps_completed)
        ).all()
    return {"checkpoints": [serialize.checkpoint(r) for r in rows]}


@router.get("/experiments/{experiment_id}/context")
def experiment_context(experiment_id: int) -> Response:
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
    return Response(row.context or b"", media_type="application/gzip")


@router.post("/experiments/{experiment_id}/{action}")
def change_experiment(experiment_id: int, action: str) -> dict:
    if action not in ("pause", "activate", "cancel", "kill", "archive", "unarchive"):
        raise experiments.NotFound(f"unknown experiment action '{action}'")
    with get_database().begin() as conn:
        experiments.change_state(conn, experiment_id, action)
        row = experiments.get_experiment(conn, experiment_id)
        return {
            "experiment": serialize.experiment(row, num_trials=experiments.count_trials(conn, experiment_id))
        }


@router.delete("/experiments/{experiment_id}")
def delete_experiment(experiment_id: int) -> dict:
    with get_database().begin() as conn:
        experiments.delete_experiment(conn, experiment_id)
    return {}


@router.get("/trials/{trial_id}")
def describe_trial(trial_id: int) -> dict:
    with get_database().read() as conn:
        return {"trial": serialize.trial(trials.get_trial(conn, trial_id))}


@router.get("/trials/{trial_id}/metrics")
def trial_metrics(trial_id: int, group: str | None = None) -> dict:
    table = schema.metrics
    query = select(table).where(table.c.trial_id == trial_id)
    if group:
        query = query.where(table.c.group == group)
    with get_database().read() as conn:
        trials.get_trial(conn, trial_id)
        rows = conn.execute(query.order_by(table.c.steps_completed, table.c.id)).all()
    return {"metrics": [serialize.metrics(r) for r in rows]}


@router.get("/trials/{trial_id}/logs")
def trial_logs(
    trial_id: int,
    after: int | None = None,
    limit: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
) -> dict:
    with get_database().read() as conn:
        trial = trials.get_trial(conn, trial_id)
        rows = trials.read_logs(conn, trial_id, after=after, limit=limit, tail=tail)
    return {"logs": [serialize.log_line(r) for r in rows], "trial_state": trial.state}


@router.get("/checkpoints/{uuid}")
def describe_checkpoint(uuid: str) -> dict:
    with get_database().read() as conn:
        return {"checkpoint": serialize.checkpoint(trials.get_checkpoint(conn, uuid))}


@router.get("/me")
def whoami(username: Username) -> dict:
    return {"username": username}
