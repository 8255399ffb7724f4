"""Routes that change an experiment's policies after it was created: which checkpoints garbage
collection keeps (``det e set gc-policy``, with its preview) and how long its ended trials keep their
logs (``det e set log-retention``). Both are stored in the experiment's config, where the checkpoint
collector (master/checkpoint_gc.py) and the log retention job (master/trial_logs.py) read them."""

from __future__ import annotations

import copy
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from sqlalchemy import Connection, Row, select

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import ExperimentAnswer, GcPolicy, GcPolicyAnswer, GcPreview, LogRetention
from det_airflow.master import checkpoint_gc, experiments, housekeeping, projects, schema, serialize
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import Caller, CallerDep, check_change, check_read
from det_airflow.master.db import get_database
from det_airflow.master.lifecycle import NotFound, StateError
from det_airflow.states import ExperimentState

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])

_Count = Annotated[int, Query(ge=0, le=2**31 - 1)]


def _experiment(conn: Connection, experiment_id: int, *, lock: bool = False) -> Row:
    """The experiment; a task (a notebook's hidden experiment) is not one."""
    row = experiments.get_experiment(conn, experiment_id, lock=lock)
    if experiments.task_ids(conn, [experiment_id]):
        raise NotFound(f"experiment {experiment_id} not found")
    return row


def _check_changeable(caller: Caller, row: Row, action: str) -> None:
    check_change(caller, row, action)
    if row.state in (ExperimentState.DELETING, ExperimentState.DELETED):
        raise StateError(f"experiment {row.id} is being deleted")


@router.get("/experiments/{experiment_id}/preview-gc", response_model=GcPreview)
def preview_gc(
    experiment_id: int,
    caller: CallerDep,
    save_experiment_best: _Count,
    save_trial_best: _Count,
    save_trial_latest: _Count,
) -> dict:
    """The COMPLETED checkpoints this policy would delete now, by trial and age; nothing changes."""
    policy = GcPolicy(
        save_experiment_best=save_experiment_best,
        save_trial_best=save_trial_best,
        save_trial_latest=save_trial_latest,
    )
    table = schema.checkpoints
    with get_database().read() as conn:
        row = _experiment(conn, experiment_id)
        check_read(caller, row, "preview the garbage collection of")
        cfg = experiments.experiment_config(row)
        uuids = [r.uuid for r in checkpoint_gc.checkpoints_to_delete(conn, experiment_id, cfg, policy)]
        rows = conn.execute(
            select(table)
            .where(table.c.uuid.in_(uuids))
            .order_by(table.c.trial_id, table.c.steps_completed, table.c.uuid)
        ).all()
    return {"checkpoints": [serialize.checkpoint(r) for r in rows], "metric_name": cfg.searcher.metric}


@router.put("/experiments/{experiment_id}/gc-policy", response_model=GcPolicyAnswer)
def set_gc_policy(experiment_id: int, body: GcPolicy, caller: CallerDep) -> dict:
    """Store the policy in the experiment's ``checkpoint_storage`` and delete, at once, the
    checkpoints it does not keep; their files go as every checkpoint deletion's do (master/removals.py)."""
    db = get_database()
    with db.read() as conn:
        _experiment(conn, experiment_id)

    def check(row: Row) -> None:
        _check_changeable(caller, row, "change the checkpoint policy of")

    deleted, not_removed = checkpoint_gc.set_policy(db, experiment_id, body, check)
    if deleted:
        housekeeping.run_soon(housekeeping.REMOVE_FILES)
    with db.read() as conn:
        experiment = projects.experiment_answer(conn, experiments.get_experiment(conn, experiment_id))
    return {"experiment": experiment, "deleted": deleted, "not_removed": not_removed}


@router.put("/experiments/{experiment_id}/log-retention", response_model=ExperimentAnswer)
def set_log_retention(experiment_id: int, body: LogRetention, caller: CallerDep) -> dict:
    """Keep the logs of the experiment's ended trials ``days`` days after each ended (-1: forever):
    ``retention_policy.log_retention_days`` of its config, which the retention job reads."""
    table = schema.experiments
    with get_database().begin() as conn:
        row = _experiment(conn, experiment_id, lock=True)
        _check_changeable(caller, row, "change the log retention of")
        config = copy.deepcopy(row.config)
        config["retention_policy"] = {
            **(config.get("retention_policy") or {}),
            "log_retention_days": body.days,
        }
        conn.execute(table.update().where(table.c.id == experiment_id).values(config=config))
        return {
            "experiment": projects.experiment_answer(conn, experiments.get_experiment(conn, experiment_id))
        }
