"""The master: a FastAPI app that the det plugin mounts at /det in Airflow's API server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api._http import API_PREFIX
from det_airflow.errors import DetError


def _status_for(exc: DetError) -> int:
    from det_airflow.master.authz import PermissionDenied
    from det_airflow.master.db import SchemaError
    from det_airflow.master.lifecycle import NotFound, StateError

    if isinstance(exc, PermissionDenied):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, StateError):
        return 409
    if isinstance(exc, SchemaError):
        return 503
    return 400  # bad input: ConfigError, ContextError, SubmissionError


def reapply_airflow_permissions() -> list[str]:
    """Under FAB: take global DAG edits away from the User role again, so that only an experiment's
    owner (through their det-owner role) and admins change its DAG through Airflow's own API.

    FAB's ``[fab] update_fab_perms`` (true by default) gives the User role its defaults back
    whenever the API server starts, before the plugins' apps start; this runs after, at every
    start of the master. Best effort: logged, never fatal to the API server."""
    from det_airflow.master import airflow_bridge

    try:
        return airflow_bridge.restrict_plain_users()
    except Exception:  # noqa: BLE001 - the API server must start; `det admin migrate` does the same
        logging.getLogger(__name__).exception(
            "could not take DAG edits away from FAB's User role; run `det admin migrate`"
        )
        return []


def _lifespan(background_jobs: bool):  # type: ignore[no-untyped-def]
    """The master app's lifespan (Airflow's API server runs the lifespans of the apps plugins
    mount): FAB's permissions set again, then housekeeping while the app serves. An API server
    process (``background_jobs``) also keeps its records for ``det master logs`` (master_logs.py)."""
    from det_airflow.master import housekeeping, master_logs

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if background_jobs:
            await asyncio.to_thread(master_logs.install)
        await asyncio.to_thread(reapply_airflow_permissions)
        if not background_jobs:
            yield
            return
        try:
            async with housekeeping.lifespan(app):
                yield
        finally:
            master_logs.uninstall()

    return lifespan


def create_app(*, background_jobs: bool = True) -> FastAPI:
    """The master app; ``background_jobs``: run housekeeping (master/housekeeping.py) and keep the
    master's log (master/master_logs.py) while it serves, as an API server process does."""
    from det_airflow.master import (
        limits,
        proxy,
        routes_agents,
        routes_experiment_policies,
        routes_internal,
        routes_jobs,
        routes_master_logs,
        routes_models,
        routes_people,
        routes_pipeline,
        routes_projects,
        routes_runtime,
        routes_storage,
        routes_tasks,
        routes_templates,
        routes_ui,
        routes_unmanaged,
        routes_webhooks,
    )

    # The API document is served below, behind a login, instead of at FastAPI's public default.
    # Airflow's API server runs the lifespan of the apps that plugins mount.
    app = FastAPI(
        title="det-airflow master",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=_lifespan(background_jobs),
    )
    prefix = API_PREFIX.removeprefix("/det")
    # Before routes_people: its /experiments/{id}/{action} would take /experiments/{id}/move.
    app.include_router(routes_projects.router, prefix=prefix)
    for module in (routes_unmanaged, routes_people, routes_ui, routes_jobs, routes_internal, routes_runtime):
        app.include_router(module.router, prefix=prefix)
    app.include_router(routes_tasks.router, prefix=prefix)
    app.include_router(routes_templates.router, prefix=prefix)
    app.include_router(routes_webhooks.router, prefix=prefix)
    app.include_router(routes_webhooks.runtime_router, prefix=prefix)
    app.include_router(routes_models.router, prefix=prefix)
    app.include_router(routes_agents.router, prefix=prefix)
    app.include_router(routes_pipeline.router, prefix=prefix)
    app.include_router(routes_master_logs.router, prefix=prefix)
    app.include_router(routes_experiment_policies.router, prefix=prefix)  # det e set gc-policy|log-retention
    app.include_router(routes_tasks.runtime_router, prefix=prefix)
    app.include_router(routes_storage.router, prefix=prefix)  # a trial's files in object storage
    app.include_router(routes_tasks.internal_router, prefix=prefix)
    app.include_router(proxy.router)  # /det/proxy/<task id>/..., beside the API

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(requires_authenticated())])
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    limits.install(app)
    # Outermost: a task's own host name reaches that task's pages only, past none of the routes
    # above (its visitors hold a session of that origin, checked before any body is read).
    app.add_middleware(proxy.TaskOrigins)

    @app.exception_handler(DetError)
    async def _det_error(_request: Request, exc: DetError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=_status_for(exc))

    @app.exception_handler(OperationalError)
    async def _database_away(_request: Request, exc: OperationalError) -> JSONResponse:
        # The database restarting or out of reach: nothing was stored (the transaction rolled back),
        # and the clients try again, so a trial rides out a database restart.
        return JSONResponse(
            {"detail": f"the master's database is unavailable, try again: {type(exc.orig).__name__}"},
            status_code=503,
        )

    return app
