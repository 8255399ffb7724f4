"""Routes of the model registry (`det model`, the Models page): see master/models_registry.py for
who may do what, and how a name finds its model. Every route that names a model takes ``owner``,
whose namespace the name is in; without it, the name means the caller's own model first."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import (
    CreateModel,
    Empty,
    ModelAnswer,
    ModelList,
    ModelVersionAnswer,
    ModelVersionList,
    PatchModel,
    PatchModelVersion,
    RegisterVersion,
)
from det_airflow.master import models_registry as registry
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])

SortBy = Literal["name", "description", "creation_time", "last_updated_time"]
OrderBy = Literal["asc", "desc"]
Owner = Annotated[str | None, Query(max_length=256, description="whose model: the name is unique per owner")]


@router.get("/models", response_model=ModelList)
def list_models(
    caller: CallerDep,
    name: str | None = None,
    owner: Owner = None,
    label: str | None = None,
    archived: bool | None = None,
    workspace_name: Annotated[list[str] | None, Query(description="in any of these workspaces")] = None,
    sort_by: SortBy = "last_updated_time",
    order_by: OrderBy = "asc",
) -> dict:
    """Every model, or those whose name contains ``name``, of ``owner``, with ``label``, archived or
    not, in the workspaces named."""
    with get_database().read() as conn:
        rows = registry.list_models(
            conn,
            name=name,
            owner=owner,
            label=label,
            archived=archived,
            workspaces=workspace_name,
            sort_by=sort_by,
            descending=order_by == "desc",
        )
        return {"models": registry.describe_models(conn, rows)}


@router.post("/models", response_model=ModelAnswer)
def create_model(body: CreateModel, caller: CallerDep) -> dict:
    """A model of the caller's; its name must be new among the caller's models."""
    with get_database().begin() as conn:
        return {
            "model": registry.describe_model(conn, registry.create_model(conn, caller, body.model_dump()))
        }


@router.get("/models/{name}", response_model=ModelAnswer)
def describe_model(name: str, caller: CallerDep, owner: Owner = None) -> dict:
    """The model named ``name`` (or, for a number, with that ID)."""
    with get_database().read() as conn:
        return {"model": registry.describe_model(conn, registry.find_model(conn, caller, name, owner=owner))}


@router.patch("/models/{name}", response_model=ModelAnswer)
def update_model(name: str, body: PatchModel, caller: CallerDep, owner: Owner = None) -> dict:
    """Change the fields given; ``labels`` and ``metadata`` are replaced whole; ``workspace_name``
    moves it, never into an archived workspace (its owner or an admin)."""
    changes = body.model_dump(exclude_none=True)
    with get_database().begin() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        return {"model": registry.describe_model(conn, registry.update_model(conn, caller, model, changes))}


@router.post("/models/{name}/archive", response_model=ModelAnswer)
def archive_model(name: str, caller: CallerDep, owner: Owner = None) -> dict:
    """Its owner or an admin."""
    with get_database().begin() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        row = registry.update_model(conn, caller, model, {"archived": True}, action="archive")
        return {"model": registry.describe_model(conn, row)}


@router.post("/models/{name}/unarchive", response_model=ModelAnswer)
def unarchive_model(name: str, caller: CallerDep, owner: Owner = None) -> dict:
    """Its owner or an admin."""
    with get_database().begin() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        row = registry.update_model(conn, caller, model, {"archived": False}, action="unarchive")
        return {"model": registry.describe_model(conn, row)}


@router.delete("/models/{name}", response_model=Empty)
def delete_model(name: str, caller: CallerDep, owner: Owner = None) -> dict:
    """Remove the model and its versions (its owner or an admin)."""
    with get_database().begin() as conn:
        registry.delete_model(conn, caller, registry.find_model(conn, caller, name, owner=owner))
    return {}


@router.get("/models/{name}/versions", response_model=ModelVersionList)
def list_versions(name: str, caller: CallerDep, owner: Owner = None, order_by: OrderBy = "asc") -> dict:
    with get_database().read() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        rows = registry.list_versions(conn, model, descending=order_by == "desc")
        return {
            "model": registry.describe_model(conn, model),
            "model_versions": registry.describe_versions(conn, model, rows),
        }


@router.post("/models/{name}/versions", response_model=ModelVersionAnswer)
def register_version(name: str, body: RegisterVersion, caller: CallerDep, owner: Owner = None) -> dict:
    """Register a COMPLETED checkpoint the caller may read as the model's next version (the model's
    owner or an admin)."""
    with get_database().begin() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        row = registry.register_version(conn, caller, model, body.model_dump())
        return {"model_version": registry.describe_versions(conn, model, [row])[0]}


@router.get("/models/{name}/versions/{version}", response_model=ModelVersionAnswer)
def describe_version(name: str, version: int, caller: CallerDep, owner: Owner = None) -> dict:
    """Version ``version`` of the model; 0 or less: its latest."""
    with get_database().read() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        row = registry.get_version(conn, model, version)
        return {"model_version": registry.describe_versions(conn, model, [row])[0]}


@router.patch("/models/{name}/versions/{version}", response_model=ModelVersionAnswer)
def update_version(
    name: str, version: int, body: PatchModelVersion, caller: CallerDep, owner: Owner = None
) -> dict:
    """Change the fields given; ``labels`` and ``metadata`` are replaced whole (the model's owner or
    an admin)."""
    changes = body.model_dump(exclude_none=True)
    with get_database().begin() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        row = registry.update_version(conn, caller, model, version, changes)
        return {"model_version": registry.describe_versions(conn, model, [row])[0]}


@router.delete("/models/{name}/versions/{version}", response_model=Empty)
def delete_version(name: str, version: int, caller: CallerDep, owner: Owner = None) -> dict:
    """Remove the version (the model's owner or an admin); its checkpoint is then GC's again."""
    with get_database().begin() as conn:
        model = registry.find_model(conn, caller, name, owner=owner)
        registry.delete_version(conn, caller, model, version)
    return {}
