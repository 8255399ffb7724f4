"""Routes for config templates (`det template`): any logged-in user reads them; setting one needs the
right to create DAG runs, and replacing or removing another's needs being an admin."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import Empty, SetTemplate, TemplateAnswer, TemplateList
from det_airflow.master import templates
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])


@router.get("/templates", response_model=TemplateList)
def list_templates(caller: CallerDep) -> dict:
    with get_database().read() as conn:
        return {"templates": [templates.describe(caller, row) for row in templates.list_templates(conn)]}


@router.get("/templates/{name}", response_model=TemplateAnswer)
def describe_template(name: str, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        return {"template": templates.describe(caller, templates.get_template(conn, name))}


@router.put("/templates/{name}", response_model=TemplateAnswer)
def set_template(name: str, body: SetTemplate, caller: CallerDep) -> dict:
    """Create the template, or replace its config."""
    config = templates.read_config(body.config, source=f"template '{templates.check_name(name)}'")
    with get_database().begin() as conn:
        return {"template": templates.describe(caller, templates.set_template(conn, caller, name, config))}


@router.delete("/templates/{name}", response_model=Empty)
def remove_template(name: str, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        templates.remove_template(conn, caller, name)
    return {}
