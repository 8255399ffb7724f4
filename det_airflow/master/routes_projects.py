"""Routes of workspaces and projects (`det workspace`, `det project`, `det e move`, the Workspaces
pages): see master/projects.py for who may do what."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import Connection

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import (
    CreateProject,
    CreateWorkspace,
    ExperimentList,
    MoveExperiment,
    PatchProject,
    ProjectAnswer,
    ProjectList,
    WorkspaceAnswer,
    WorkspaceList,
)
from det_airflow.master import experiments, serialize
from det_airflow.master import projects as places
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])


def _workspace_answer(conn: Connection, workspace_id: int) -> dict:
    return places.describe_workspaces(conn, [places.get_workspace(conn, workspace_id)])[0]


@router.get("/workspaces", response_model=WorkspaceList)
def list_workspaces(caller: CallerDep, name: str | None = None) -> dict:
    """Every workspace, or the one named ``name``."""
    with get_database().read() as conn:
        return {"workspaces": places.describe_workspaces(conn, places.list_workspaces(conn, name=name))}


@router.post("/workspaces", response_model=WorkspaceAnswer)
def create_workspace(body: CreateWorkspace, caller: CallerDep) -> dict:
    """Admins only."""
    with get_database().begin() as conn:
        row = places.create_workspace(conn, caller, body.name)
        return {"workspace": _workspace_answer(conn, row.id)}


@router.get("/workspaces/{workspace_id}/projects", response_model=ProjectList)
def list_projects(workspace_id: int, caller: CallerDep, name: str | None = None) -> dict:
    """The workspace and its projects, or its project named ``name``."""
    with get_database().read() as conn:
        workspace = places.get_workspace(conn, workspace_id)
        rows = places.list_projects(conn, workspace, name=name)
        return {
            "workspace": _workspace_answer(conn, workspace.id),
            "projects": places.describe_projects(conn, rows),
        }


@router.post("/workspaces/{workspace_id}/projects", response_model=ProjectAnswer)
def create_project(workspace_id: int, body: CreateProject, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        workspace = places.get_workspace(conn, workspace_id)
        row = places.create_project(conn, caller, workspace, body.model_dump())
        return {"project": places.describe_project(conn, row)}


@router.get("/projects/{project_id}", response_model=ProjectAnswer)
def describe_project(project_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        return {"project": places.describe_project(conn, places.get_project(conn, project_id))}


@router.patch("/projects/{project_id}", response_model=ProjectAnswer)
def update_project(project_id: int, body: PatchProject, caller: CallerDep) -> dict:
    """Change the description or the Markdown notes (those given): the project's owner, its
    workspace's owner, or an admin."""
    changes = body.model_dump(exclude_none=True)
    with get_database().begin() as conn:
        return {
            "project": places.describe_project(conn, places.update_project(conn, caller, project_id, changes))
        }


@router.get("/projects/{project_id}/experiments", response_model=ExperimentList)
def list_project_experiments(project_id: int, caller: CallerDep, all: bool = False) -> dict:  # noqa: A002
    """The project's experiments that the caller may read; ``all``: archived ones too."""
    with get_database().read() as conn:
        project = places.get_project(conn, project_id)
        rows = places.project_experiments(conn, caller, project, archived=all)
        return {
            "experiments": [
                serialize.experiment(row, num_trials=experiments.count_trials(conn, row.id)) for row in rows
            ]
        }


@router.post("/experiments/{experiment_id}/move", response_model=ProjectAnswer)
def move_experiment(experiment_id: int, body: MoveExperiment, caller: CallerDep) -> dict:
    """Put the experiment in another project (its owner or an admin, who may file into that
    project: its owner, its workspace's, an admin; anyone into Uncategorized); answers that project."""
    with get_database().begin() as conn:
        target = places.move_experiment(conn, caller, experiment_id, body.workspace, body.project)
        return {"project": places.describe_project(conn, target)}
