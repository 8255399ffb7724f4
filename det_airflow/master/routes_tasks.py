"""Routes for tasks beside experiments (notebooks, TensorBoards, commands, shells, generic tasks):
people start, list and kill them and read their configs; the task's own program, with its trial's
token, asks what to run (and, in a pod, says where its server listens); a local or Docker task's
runner, with det's service token, says where its server listens once it has checked that the port
is the task's own."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import (
    ConfigAnswer,
    CreateTask,
    Empty,
    TaskAnswer,
    TaskList,
    TaskReady,
    TaskRuntime,
)
from det_airflow.master import caps, experiment_state, experiments, tasks, trials
from det_airflow.master.auth import CrossSiteGuard, ServiceAuth, TrialAuth
from det_airflow.master.authz import CallerDep, check_change, check_create, check_read
from det_airflow.master.db import get_database
from det_airflow.states import ExperimentState

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])
runtime_router = APIRouter(prefix="/runtime")
internal_router = APIRouter(prefix="/internal", dependencies=[ServiceAuth])


@router.post("/tasks", response_model=TaskAnswer)
def create_task(body: CreateTask, caller: CallerDep) -> dict:
    """Start a task: it waits in the job queue for its slots like an experiment's trial."""
    check_create(caller)
    db = get_database()
    with caps.creates.hold(caller.name):
        task = tasks.create_task(
            db,
            caller,
            tasks.TaskRequest(
                type=body.type,
                config=body.config,
                context=body.context,
                command=body.command,
                experiment_ids=body.experiment_ids,
                trial_ids=body.trial_ids,
                forked_from=body.forked_from,
                project_id=body.project_id,
            ),
        )
    trials.make_room_for_submitted(db, task["id"], task["resource_pool"])
    return {"task": task}


@router.get("/tasks", response_model=TaskList)
def list_tasks(caller: CallerDep, type: str | None = None, all: bool = False) -> dict:  # noqa: A002 - the CLI's names
    """The caller's tasks, or with ``all`` every task the caller may read."""
    tasks.check_type(type)
    with get_database().read() as conn:
        return {"tasks": tasks.list_tasks(conn, caller, task_type=type, everyone=all)}


@router.get("/tasks/{task_id}", response_model=TaskAnswer)
def describe_task(task_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        task = tasks.get_task(conn, task_id)
        experiment = experiments.get_experiment(conn, task_id)
        check_read(caller, experiment, "describe")
        return {"task": tasks.describe(conn, task, experiment)}


@router.get("/tasks/{task_id}/config", response_model=ConfigAnswer)
def task_config(task_id: int, caller: CallerDep) -> dict:
    """The task's config as submitted; its secrets masked for all but its owner and admins."""
    with get_database().read() as conn:
        return {"config": tasks.task_config(conn, caller, task_id)}


@router.post("/tasks/{task_id}/kill", response_model=TaskAnswer)
def kill_task(task_id: int, caller: CallerDep) -> dict:
    """Stop the task now (its owner or an admin); its slots go back to the queue."""
    with get_database().begin() as conn:
        task = tasks.get_task(conn, task_id)
        experiment = experiments.get_experiment(conn, task_id)
        check_change(caller, experiment, f"kill {task.type}")
        if not ExperimentState(experiment.state).is_terminal:
            experiment_state.change_state(conn, task_id, "kill")
        return {"task": tasks.describe(conn, task)}


@runtime_router.get("/trials/{trial_id}/task", response_model=TaskRuntime)
def task_runtime(trial_id: TrialAuth) -> dict:
    with get_database().read() as conn:
        return tasks.runtime_answer(conn, trial_id)


@runtime_router.post("/trials/{trial_id}/task/ready", response_model=Empty)
def task_ready(trial_id: TrialAuth, body: TaskReady) -> dict:
    """A pod's program: where its server listens (a local or Docker task's own report is refused)."""
    with get_database().begin() as conn:
        tasks.mark_ready(conn, trial_id, body.port, body.secret, body.address)
    return {}


@internal_router.post("/trials/{trial_id}/task/ready", response_model=Empty)
def task_ready_by_runner(trial_id: int, body: TaskReady) -> dict:
    """The trial's runner: the task's server listens on a port its own process holds."""
    with get_database().begin() as conn:
        tasks.mark_ready(conn, trial_id, body.port, body.secret, body.address, by_runner=True)
    return {}


@internal_router.delete("/trials/{trial_id}/task/ready", response_model=Empty)
def task_gone_by_runner(trial_id: int, port: Annotated[int, Query(ge=1, le=65535)]) -> dict:
    """The trial's runner: the task's server no longer holds ``port``; the proxy stops going there."""
    with get_database().begin() as conn:
        tasks.mark_gone(conn, trial_id, port)
    return {}
