"""Who may do what to an experiment: Airflow's auth manager decides, on the experiment's DAG.

Reading an experiment (its trials, metrics, logs, checkpoints, config, context) needs read access to
its DAG; creating one needs the right to create DAG runs; changing one needs edit access to its DAG
and being its owner or an admin (Determined's rule). An admin is a user the auth manager lets change
Airflow's configuration (under FAB, which grants that to no role: one who may edit roles): this is
the one place the word is defined.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import Depends
from sqlalchemy import Row

from det_airflow.airflow_compat import get_user
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager

Method = Literal["GET", "POST", "PUT", "DELETE"]


class PermissionDenied(DetError):
    """The logged-in user may not do this (HTTP 403)."""


def _auth_manager() -> BaseAuthManager:
    from det_airflow.airflow_compat import get_auth_manager

    return get_auth_manager()


def _team_of(dag_id: str) -> str | None:
    from airflow.sdk import conf

    if not conf.getboolean("core", "multi_team", fallback=False):
        return None
    # No auth-manager method names a DAG's team; Airflow's own routes ask the DAG's row.
    from det_airflow.airflow_compat import DagModel

    return DagModel.get_team_name(dag_id)


@dataclass
class Caller:
    """A person logged in to Airflow, as the auth manager knows them."""

    user: BaseUser

    @property
    def name(self) -> str:
        return str(self.user.get_name())

    @functools.cached_property
    def is_admin(self) -> bool:
        manager = _auth_manager()
        if manager.is_authorized_configuration(method="PUT", user=self.user):
            return True
        # FAB grants no role edit access to the configuration; its Admin role is the one that may
        # edit roles. Asked only of FAB: other managers answer custom views for every viewer.
        if type(manager).__name__ == "FabAuthManager":
            return bool(
                manager.is_authorized_custom_view(method="PUT", resource_name="Roles", user=self.user)
            )
        return False

    def may_access_dag(self, dag_id: str | None, method: Method) -> bool:
        if dag_id is None:  # not linked to a DAG yet: nobody's but an admin's business
            return self.is_admin
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        details = DagDetails(id=dag_id, team_name=_team_of(dag_id))
        return bool(_auth_manager().is_authorized_dag(method=method, details=details, user=self.user))

    def may_create_runs(self) -> bool:
        from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

        return bool(
            _auth_manager().is_authorized_dag(
                method="POST", access_entity=DagAccessEntity.RUN, user=self.user
            )
        )

    def may_use_pool(self, pool: str) -> bool:
        """Whether the caller may run jobs in Airflow pool ``pool``: read access to it, as the
        auth manager decides per pool."""
        from airflow.api_fastapi.auth.managers.models.resource_details import PoolDetails

        return bool(
            _auth_manager().is_authorized_pool(method="GET", details=PoolDetails(name=pool), user=self.user)
        )

    def sees_secrets_of(self, experiment: Row) -> bool:
        return experiment.owner == self.name or self.is_admin


async def _current_caller(user: Annotated[BaseUser, Depends(get_user)]) -> Caller:
    return Caller(user)


CallerDep = Annotated[Caller, Depends(_current_caller)]


def check_read(caller: Caller, experiment: Row, what: str = "read") -> None:
    """Refuse unless the caller may read the experiment's DAG."""
    if experiment.dag_id is None:  # unmanaged: no DAG to ask about, so its owner's and admins'
        _check_owner_or_admin(caller, experiment, what)
        return
    if not caller.may_access_dag(experiment.dag_id, "GET"):
        raise PermissionDenied(
            f"user '{caller.name}' may not {what} experiment {experiment.id}: "
            f"needs read access to DAG '{experiment.dag_id}'"
        )


def check_change(caller: Caller, experiment: Row, action: str) -> None:
    """Refuse unless the caller may edit the experiment's DAG and owns the experiment or is an admin."""
    if experiment.dag_id is None:
        _check_owner_or_admin(caller, experiment, action)
        return
    if not caller.may_access_dag(experiment.dag_id, "PUT"):
        raise PermissionDenied(
            f"user '{caller.name}' may not {action} experiment {experiment.id}: "
            f"needs edit access to DAG '{experiment.dag_id}'"
        )
    if experiment.owner != caller.name and not caller.is_admin:
        raise PermissionDenied(
            f"user '{caller.name}' may not {action} experiment {experiment.id}: "
            f"it belongs to '{experiment.owner}'; only its owner or an admin may change it"
        )


def _check_owner_or_admin(caller: Caller, experiment: Row, action: str) -> None:
    if experiment.owner != caller.name and not caller.is_admin:
        raise PermissionDenied(
            f"user '{caller.name}' may not {action} experiment {experiment.id}: it is an unmanaged "
            f"experiment of '{experiment.owner}'; only its owner or an admin may"
        )


def check_pool(caller: Caller, pool: str) -> None:
    """Refuse unless the caller may run jobs in Airflow pool ``pool`` (read access to it)."""
    if not caller.may_use_pool(pool):
        raise PermissionDenied(f"user '{caller.name}' may not use pool '{pool}': needs read access to it")


def check_create(caller: Caller) -> None:
    if not caller.may_create_runs():
        raise PermissionDenied(
            f"user '{caller.name}' may not create experiments: needs the right to create DAG runs"
        )


def readable(caller: Caller, experiments: Sequence[Row]) -> list[Row]:
    """The experiments whose DAG the caller may read, asked of the auth manager in one batch."""
    dag_ids = {row.dag_id for row in experiments if row.dag_id is not None}
    allowed = _readable_dag_ids(caller, dag_ids)
    return [
        row
        for row in experiments
        if (row.dag_id in allowed if row.dag_id is not None else row.owner == caller.name or caller.is_admin)
    ]


def _readable_dag_ids(caller: Caller, dag_ids: Iterable[str]) -> set[str]:
    from airflow.sdk import conf

    manager = _auth_manager()
    ids = set(dag_ids)
    if not conf.getboolean("core", "multi_team", fallback=False):
        return set(manager.filter_authorized_dag_ids(dag_ids=ids, user=caller.user, method="GET"))
    by_team: dict[str | None, set[str]] = {}
    for dag_id in ids:
        by_team.setdefault(_team_of(dag_id), set()).add(dag_id)
    allowed: set[str] = set()
    for team, team_ids in by_team.items():
        allowed |= manager.filter_authorized_dag_ids(
            dag_ids=team_ids, user=caller.user, method="GET", team_name=team
        )
    return allowed
