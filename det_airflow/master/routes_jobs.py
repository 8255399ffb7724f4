"""Routes for people: the job queue (`det job list`, `det job update`, `det e set`) and the worker
hosts (`det agent list`, `det slot list`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy import Connection, Row

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import Hosts, JobList, JobUpdate, JobUpdates, UpdatedJobs
from det_airflow.master import airflow_bridge, experiments, hosts, queue, queue_policy, schema
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import Caller, CallerDep, check_change, readable
from det_airflow.master.db import get_database
from det_airflow.master.queue import QueueError

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])


@router.get("/jobs", response_model=JobList)
def list_jobs(
    caller: CallerDep,
    resource_pool: str | None = None,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> dict:
    """Unfinished jobs in scheduling order, per pool. Every logged-in user sees the whole queue
    (it is shared); the name and owner of a job the caller may not read are left out."""
    db = get_database()
    with db.read() as conn:
        pools = [resource_pool] if resource_pool else queue.pools_in_use(conn)
        jobs: list[dict[str, Any]] = []
        for pool in pools:
            jobs.extend(queue.job_rows(conn, pool))
        rows = [experiments.get_experiment(conn, job["id"]) for job in jobs]
    allowed = {row.id for row in readable(caller, rows)}
    for job in jobs:
        if job["id"] not in allowed:
            job["name"] = None
            job["user"] = None
    return {"jobs": jobs[:limit] if limit is not None else jobs}


@router.get("/agents", response_model=Hosts)
def list_agents() -> dict:
    """The worker hosts (Determined's agents) with their slots and the trials holding them, as
    `det agent list` and `det slot list` show them. Every logged-in user sees them, as the queue."""
    with get_database().read() as conn:
        return {"agents": hosts.describe(conn)}


@router.post("/jobs/update", response_model=UpdatedJobs)
def update_jobs(body: JobUpdates, caller: CallerDep) -> dict:
    """Apply every update in one transaction: all of them or, on the first error, none."""
    airflow_changes: list[tuple[Row, dict[str, Any]]] = []
    with get_database().begin() as conn:
        for update in body.updates:
            airflow_changes.append(_apply(conn, caller, update))
        changed = [experiments.get_experiment(conn, update.job_id) for update in body.updates]
    # Airflow's own view follows once the queue change is stored: its waiting trial task instances.
    for row, change in airflow_changes:
        if change and row.dag_id and row.dag_run_id:
            airflow_bridge.update_waiting_trials(row.dag_id, row.dag_run_id, **change)
    return {
        "jobs": [
            {"id": row.id, **queue.effective(row), "resource_pool": row.resource_pool} for row in changed
        ]
    }


def _job(conn: Connection, job_id: int, *, lock: bool = False) -> Row:
    row = experiments.get_experiment(conn, job_id, lock=lock)
    if row.state in {s.value for s in queue_policy.FINISHED_EXPERIMENTS}:
        raise QueueError(f"job {job_id} has finished ({row.state}); only unfinished jobs can be changed")
    return row


def _set(conn: Connection, job_id: int, **values: Any) -> None:
    conn.execute(schema.experiments.update().where(schema.experiments.c.id == job_id).values(**values))


def _apply(conn: Connection, caller: Caller, update: JobUpdate) -> tuple[Row, dict[str, Any]]:
    """Store one change; returns the job and what Airflow's task instances must follow."""
    row = _job(conn, update.job_id, lock=True)
    check_change(caller, row, "change the priority of")
    if update.priority is not None:
        _set(conn, row.id, priority=update.priority)
        return row, {"priority": update.priority}
    if update.weight is not None:
        _set(conn, row.id, weight=update.weight)
        return row, {}
    if update.max_slots is not None:
        gang = queue.effective(row)["slots_per_trial"]
        if update.max_slots < gang:
            raise QueueError(
                f"job {row.id}: max_slots {update.max_slots} is less than its {gang} slots per trial; "
                "no trial could ever run"
            )
        _set(conn, row.id, max_slots=update.max_slots)
        return row, {}
    if update.resource_pool is not None:
        return row, _move_to_pool(conn, row, update.resource_pool)
    anchor_id = update.ahead_of if update.ahead_of is not None else update.behind_of
    assert anchor_id is not None  # the body allows exactly one change
    return row, _move_near(conn, row, anchor_id, ahead=update.ahead_of is not None)


def _move_to_pool(conn: Connection, row: Row, pool: str) -> dict[str, Any]:
    slots = airflow_bridge.pool_slots(pool)
    if slots is None:
        raise QueueError(f"job {row.id}: Airflow pool '{pool}' does not exist")
    gang = queue.effective(row)["slots_per_trial"]
    if slots != -1 and gang > slots:
        raise QueueError(
            f"job {row.id}: needs {gang} slots per trial, but Airflow pool '{pool}' has only {slots} slots"
        )
    _set(conn, row.id, resource_pool=pool)
    return {"pool": pool}


def _move_near(conn: Connection, row: Row, anchor_id: int, *, ahead: bool) -> dict[str, Any]:
    if anchor_id == row.id:
        raise QueueError(f"job {row.id} cannot be moved {'ahead of' if ahead else 'behind'} itself")
    try:
        anchor = _job(conn, anchor_id)
    except experiments.NotFound:
        raise QueueError(f"job {row.id}: anchor job {anchor_id} not found") from None
    if anchor.resource_pool != row.resource_pool:
        raise QueueError(
            f"job {row.id} is in resource pool '{row.resource_pool}' but job {anchor_id} is in "
            f"'{anchor.resource_pool}'; move it to that pool first"
        )
    snap = queue.snapshot(conn, row.resource_pool, capacity=-1)
    priority = queue.effective(anchor)["priority"]
    moved = [
        job if job.id != row.id else queue_policy.Job(job.id, priority, job.position, job.slots_per_trial)
        for job in snap.jobs
    ]
    position = queue_policy.position_near(moved, anchor_id, ahead=ahead, moving_id=row.id)
    changes: dict[str, Any] = {"queue_position": position}
    if priority != queue.effective(row)["priority"]:
        changes["priority"] = priority  # ahead of a job of another priority means taking its priority
    _set(conn, row.id, **changes)
    return {"priority": priority} if "priority" in changes else {}
