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
    PatchWorkspace,
    ProjectAnswer,
    ProjectList,
    WorkspaceAnswer,
    WorkspaceList,
)
from det_airflow.master import projects as places
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])


def _workspace_answer(conn: Connection, workspace_id: int) -> dict:
    return places.describe_workspaces(conn, [places.get_workspace(conn, workspace_id)])[0]


@router.get("/workspaces", response_model=WorkspaceList)
def list_workspaces(caller: CallerDep, name: str | None = None, archived: bool | None = None) -> dict:
    """Every workspace, or the one named ``name``; ``archived``: only the archived ones, or only the
    others (Determined's filter; its CLI lists them all)."""
    with get_database().read() as conn:
        rows = places.list_workspaces(conn, name=name, archived=archived)
        return {"workspaces": places.describe_workspaces(conn, rows)}


@router.post("/workspaces", response_model=WorkspaceAnswer)
def create_workspace(body: CreateWorkspace, caller: CallerDep) -> dict:
    """Admins only."""
    with get_database().begin() as conn:
        row = places.create_workspace(conn, caller, body.name)
        return {"workspace": _workspace_answer(conn, row.id)}


@router.patch("/workspaces/{workspace_id}", response_model=WorkspaceAnswer)
def update_workspace(workspace_id: int, body: PatchWorkspace, caller: CallerDep) -> dict:
    """Rename it: its creator or an admin; never the Uncategorized workspace, nor an archived one."""
    with get_database().begin() as conn:
        if body.name is not None:
            places.rename_workspace(conn, caller, workspace_id, body.name)
        return {"workspace": _workspace_answer(conn, workspace_id)}


@router.post("/workspaces/{workspace_id}/archive", response_model=WorkspaceAnswer)
def archive_workspace(workspace_id: int, caller: CallerDep) -> dict:
    """It takes no new projects, and its projects no new experiments, until unarchived."""
    with get_database().begin() as conn:
        places.set_workspace_archived(conn, caller, workspace_id, True)
        return {"workspace": _workspace_answer(conn, workspace_id)}


@router.post("/workspaces/{workspace_id}/unarchive", response_model=WorkspaceAnswer)
def unarchive_workspace(workspace_id: int, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        places.set_workspace_archived(conn, caller, workspace_id, False)
        return {"workspace": _workspace_answer(conn, workspace_id)}


@router.delete("/workspaces/{workspace_id}", response_model=WorkspaceAnswer)
def delete_workspace(workspace_id: int, caller: CallerDep) -> dict:
    """Delete it with its projects, refused while any of them holds an experiment; answers it as it was."""
    with get_database().begin() as conn:
        return {"workspace": places.delete_workspace(conn, caller, workspace_id)}


@router.get("/workspaces/{workspace_id}/projects", response_model=ProjectList)
def list_projects(
    workspace_id: int, caller: CallerDep, name: str | None = None, archived: bool | None = None
) -> dict:
    """The workspace and its projects, or its project named ``name``; ``archived`` as for workspaces."""
    with get_database().read() as conn:
        workspace = places.get_workspace(conn, workspace_id)
        rows = places.list_projects(conn, workspace, name=name, archived=archived)
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
    """Change the name, the description or the Markdown notes (those given): the project's owner,
    its workspace's owner, or an admin; not while it or its workspace is archived."""
    changes = body.model_dump(exclude_none=True)
    with get_database().begin() as conn:
        return {
            "project": places.describe_project(conn, places.update_project(conn, caller, project_id, changes))
        }


@router.post("/projects/{project_id}/archive", response_model=ProjectAnswer)
def archive_project(project_id: int, caller: CallerDep) -> dict:
    """It takes no new experiments and no edits until unarchived."""
    with get_database().begin() as conn:
        row = places.set_project_archived(conn, caller, project_id, True)
        return {"project": places.describe_project(conn, row)}


@router.post("/projects/{project_id}/unarchive", response_model=ProjectAnswer)
def unarchive_project(project_id: int, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        row = places.set_project_archived(conn, caller, project_id, False)
        return {"project": places.describe_project(conn, row)}


@router.delete("/projects/{project_id}", response_model=ProjectAnswer)
def delete_project(project_id: int, caller: CallerDep) -> dict:
    """Delete it, refused while it holds an experiment (move or delete them first); answers it as it was."""
    with get_database().begin() as conn:
        return {"project": places.delete_project(conn, caller, project_id)}


@router.get("/projects/{project_id}/experiments", response_model=ExperimentList)
def list_project_experiments(project_id: int, caller: CallerDep, all: bool = False) -> dict:  # noqa: A002
    """The project's experiments that the caller may read; ``all``: archived ones too."""
    with get_database().read() as conn:
        project = places.get_project(conn, project_id)
        rows = places.project_experiments(conn, caller, project, archived=all)
        return {"experiments": places.experiment_answers(conn, rows)}


@router.post("/experiments/{experiment_id}/move", response_model=ProjectAnswer)
def move_experiment(experiment_id: int, body: MoveExperiment, caller: CallerDep) -> dict:
    """Put the experiment in another project (its owner or an admin, who may file into that
    project: its owner, its workspace's, an admin; anyone into Uncategorized); answers that project."""
    with get_database().begin() as conn:
        target = places.move_experiment(conn, caller, experiment_id, body.workspace, body.project)
        return {"project": places.describe_project(conn, target)}
