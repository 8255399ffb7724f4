"""The route of ``det master logs``: the master's own log records (master/master_logs.py), admins only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import MasterLogList
from det_airflow.master import master_logs
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep, PermissionDenied

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])


@router.get("/master/logs", response_model=MasterLogList)
def read_master_logs(
    caller: CallerDep,
    tail: Annotated[
        int | None, Query(ge=0, le=2**31, description="the last N records; 0 or none: all")
    ] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11, description="seconds since the epoch")] = None,
) -> dict:
    """The records of this machine's API server processes, oldest first (at most
    ``master_logs.MAX_ANSWER``). They name hosts, paths and what users typed: admins only."""
    if not caller.is_admin:
        raise PermissionDenied(f"user '{caller.name}' may not read the master's logs: only admins may")
    records = master_logs.read(master_logs.log_folder(), tail=tail, since=since)
    return {"entries": [record.to_wire() for record in records]}
