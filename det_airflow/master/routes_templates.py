"""Routes for config templates (`det template`): see master/templates.py for whose a name is.

A caller reads, in full, their own templates and the shared ones (admins: every one); setting one
needs the right to create DAG runs, and a shared one (``shared``) being an admin.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import Empty, SetTemplate, TemplateAnswer, TemplateList
from det_airflow.master import templates
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])

Owner = Annotated[
    str | None, Query(max_length=256, description="whose personal template (another's: admins only)")
]
Shared = Annotated[bool, Query(description="the shared template of that name (admins manage them)")]


@router.get("/templates", response_model=TemplateList)
def list_templates(caller: CallerDep) -> dict:
    """The caller's own templates and the shared ones; an admin's: every template."""
    with get_database().read() as conn:
        return {
            "templates": [templates.describe(row, caller) for row in templates.list_templates(conn, caller)]
        }


@router.get("/templates/{name}", response_model=TemplateAnswer)
def describe_template(name: str, caller: CallerDep, owner: Owner = None, shared: Shared = False) -> dict:
    """Without ``owner`` or ``shared``: the template the caller's experiments naming it get (their
    own, else the shared one)."""
    with get_database().read() as conn:
        row = templates.find_template(conn, caller, name, owner=owner, shared=shared)
        return {"template": templates.describe(row, caller)}


@router.put("/templates/{name}", response_model=TemplateAnswer)
def set_template(name: str, body: SetTemplate, caller: CallerDep, shared: Shared = False) -> dict:
    """Create or replace the caller's own template, or with ``shared`` (admins) the shared one."""
    config = templates.read_config(body.config, source=f"template '{templates.check_name(name)}'")
    with get_database().begin() as conn:
        row = templates.set_template(conn, caller, name, config, shared=shared)
        return {"template": templates.describe(row, caller)}


@router.delete("/templates/{name}", response_model=Empty)
def remove_template(name: str, caller: CallerDep, owner: Owner = None, shared: Shared = False) -> dict:
    """The caller's own template, another's (admins), or with ``shared`` (admins) the shared one:
    never a shared one unless asked for by name."""
    with get_database().begin() as conn:
        row = templates.find_template(conn, caller, name, owner=owner or caller.name, shared=shared)
        templates.remove_template(conn, caller, row)
    return {}
