"""The one door into Airflow modules outside its public interface.

Airflow's "Public Interface" page promises stable behaviour for ``airflow.sdk``, hooks, triggers,
plugins, providers, the auth-manager base class, ``airflow.exceptions`` and ``airflow.utils.state``
(among a few others), and for nothing else. The master lives inside Airflow's API server and reads
or changes Airflow's own tables and users, which no public Python interface covers. Every such name
det uses is listed here, once, with why no public way serves; the rest of det imports these names
from this module, and ``tests/unit/test_import_graph.py`` fails on any other import of a non-public
Airflow module.

Names load on first use (PEP 562): importing this module loads nothing of Airflow, so `det admin`
and the master's modules load only the pieces they use, when they use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> (module, attribute). The public alternative, or why there is none, beside each.
NON_PUBLIC: dict[str, tuple[str, str]] = {
    # Configuration: `airflow.sdk.conf` (public) reads the same files and is det's reader. The
    # metadata database's URL alone is read here: in task and triggerer processes Airflow replaces
    # it on this parser only, which keeps det's database code out of them.
    "conf": ("airflow.configuration", "conf"),
    # A session on Airflow's metadata database, for the ORM uses below: plugins get no public one.
    "create_session": ("airflow.utils.session", "create_session"),
    # Row locks as Airflow takes them (no-op on SQLite): no public equivalent.
    "with_row_locks": ("airflow.utils.sqlalchemy", "with_row_locks"),
    # Pools: REST `GET /api/v2/pools/{name}` is public, but the master is the API server itself
    # and has no credential to call its own API with.
    "Pool": ("airflow.models.pool", "Pool"),
    # DAGs, DAG runs and task instances: REST `/api/v2/dags/...` covers reads, deletes and clears
    # but not `priority_weight`/`pool` of waiting task instances nor a cleared try kept as success;
    # the same missing self-credential applies. A DAG's team (`DagModel.get_team_name`) has no
    # public reader at all: the auth manager takes the team as an argument.
    "DagModel": ("airflow.models.dag", "DagModel"),
    "DagRun": ("airflow.models.dagrun", "DagRun"),
    "TaskInstance": ("airflow.models.taskinstance", "TaskInstance"),
    # Start a `det experiment create` DAG's one (manual) run in the transaction that writes the
    # DAG: REST `POST /api/v2/dags/{dag_id}/dagRuns` (and the function behind it, which commits
    # through a session of its own) cannot join that transaction, and needs a credential the
    # master (the API server itself) does not have.
    "SerializedDagModel": ("airflow.models.serialized_dag", "SerializedDagModel"),
    "DagRunType": ("airflow.utils.types", "DagRunType"),
    "DagRunTriggeredByType": ("airflow.utils.types", "DagRunTriggeredByType"),
    "clear_task_instances": ("airflow.models.taskinstance", "clear_task_instances"),
    # Ask for a parse now: REST `PUT /api/v2/parseDagFile/{file_token}` does the same through HTTP.
    "DagPriorityParsingRequest": ("airflow.models.dagbag", "DagPriorityParsingRequest"),
    # Write a DAG into Airflow's tables at once, as the DAG processor does: no public way at all.
    "DagBag": ("airflow.dag_processing.dagbag", "DagBag"),
    "sync_bag_to_db": ("airflow.dag_processing.dagbag", "sync_bag_to_db"),
    # Delete a DAG with its runs: REST `DELETE /api/v2/dags/{dag_id}` (self-credential again).
    "delete_dag": ("airflow.api.common.delete_dag", "delete_dag"),
    # Write the service connection: REST `POST /api/v2/connections` needs a running API server,
    # and `det admin migrate` runs before one; `airflow.sdk.Connection` only reads. A Celery
    # worker's main process (the host heartbeat) reads through it: outside a task the SDK's lookup
    # skips the metadata database.
    "Connection": ("airflow.models.connection", "Connection"),
    # The configured auth manager instance: its class (BaseAuthManager) is public, the accessor not.
    "get_auth_manager": ("airflow.api_fastapi.app", "get_auth_manager"),
    # Who is logged in, as Airflow's own routes resolve it (cookie or Bearer token): plugins' FastAPI
    # apps get no public dependency for it.
    "get_user": ("airflow.api_fastapi.core_api.security", "get_user"),
    "requires_authenticated": ("airflow.api_fastapi.core_api.security", "requires_authenticated"),
    # FAB's roles and its login cache: FAB's auth manager is a provider's implementation, not the
    # public BaseAuthManager; per-DAG roles exist only there.
    "ApplessAirflowSecurityManager": (
        "airflow.providers.fab.www.security_appless",
        "ApplessAirflowSecurityManager",
    ),
    "FabAuthManager": ("airflow.providers.fab.auth_manager.fab_auth_manager", "FabAuthManager"),
}

if TYPE_CHECKING:  # the same names, for type checkers; kept equal to NON_PUBLIC by a test
    from airflow.api.common.delete_dag import delete_dag as delete_dag
    from airflow.api_fastapi.app import get_auth_manager as get_auth_manager
    from airflow.api_fastapi.core_api.security import get_user as get_user
    from airflow.api_fastapi.core_api.security import requires_authenticated as requires_authenticated
    from airflow.configuration import conf as conf
    from airflow.dag_processing.dagbag import DagBag as DagBag
    from airflow.dag_processing.dagbag import sync_bag_to_db as sync_bag_to_db
    from airflow.models.connection import Connection as Connection
    from airflow.models.dag import DagModel as DagModel
    from airflow.models.dagbag import DagPriorityParsingRequest as DagPriorityParsingRequest
    from airflow.models.dagrun import DagRun as DagRun
    from airflow.models.pool import Pool as Pool
    from airflow.models.serialized_dag import SerializedDagModel as SerializedDagModel
    from airflow.models.taskinstance import TaskInstance as TaskInstance
    from airflow.models.taskinstance import clear_task_instances as clear_task_instances
    from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager as FabAuthManager
    from airflow.providers.fab.www.security_appless import (
        ApplessAirflowSecurityManager as ApplessAirflowSecurityManager,
    )
    from airflow.utils.session import create_session as create_session
    from airflow.utils.sqlalchemy import with_row_locks as with_row_locks
    from airflow.utils.types import DagRunTriggeredByType as DagRunTriggeredByType
    from airflow.utils.types import DagRunType as DagRunType


def __getattr__(name: str) -> Any:
    """Import a listed name on first use (ImportError when its package is not installed, e.g. FAB)."""
    try:
        module, attribute = NON_PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
