"""Routes that take worker hosts (Determined's agents) and their slots out of service and back
(`det agent|slot enable|disable`), at Determined's paths; admins only. See master/host_switches.py
for what disabling does to the work on them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends
from sqlalchemy import Connection

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import DisableAgent, HostAnswer
from det_airflow.master import host_switches, hosts
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep
from det_airflow.master.db import get_database
from det_airflow.master.lifecycle import StateError

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])
# Disabling without a body (as with Determined's CLI before --drain) stops what runs there.
_NO_DRAIN = DisableAgent(drain=False)


def _switchable(conn: Connection, agent_id: str) -> None:
    """Refuses the LocalExecutor's machine, which `det agent list` shows but which reports no
    heartbeat and takes no placement: what runs there is what its pools admit."""
    local = hosts.local_host(conn)
    if local is not None and local.id == agent_id:
        raise StateError(
            f"agent '{agent_id}' is the machine Airflow's LocalExecutor runs every task on, not a worker "
            "host: it cannot be disabled; a pool's slots limit what runs there (airflow pools set)"
        )


def _answer(conn: Connection, agent_id: str) -> dict:
    (agent,) = hosts.describe(conn, agent_id)
    return {"agent": agent}


@router.post("/agents/{agent_id}/enable", response_model=HostAnswer)
def enable_agent(agent_id: str, caller: CallerDep) -> dict:
    """The host and all its slots take new work again."""
    with get_database().begin() as conn:
        _switchable(conn, agent_id)
        host_switches.enable_agent(conn, caller, agent_id)
        return _answer(conn, agent_id)


@router.post("/agents/{agent_id}/disable", response_model=HostAnswer)
def disable_agent(
    agent_id: str, caller: CallerDep, body: Annotated[DisableAgent, Body()] = _NO_DRAIN
) -> dict:
    """The host takes no new work; what runs there is preempted (tasks killed) unless ``drain``."""
    with get_database().begin() as conn:
        _switchable(conn, agent_id)
        held = hosts.holdings(conn, agent_id).get(agent_id, [])  # hosts reads the switches: given here
        host_switches.disable_agent(conn, caller, agent_id, held, drain=body.drain)
        return _answer(conn, agent_id)


@router.post("/agents/{agent_id}/slots/{slot_id}/enable", response_model=HostAnswer)
def enable_slot(agent_id: str, slot_id: int, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        _switchable(conn, agent_id)
        host_switches.enable_slot(conn, caller, agent_id, slot_id)
        return _answer(conn, agent_id)


@router.post("/agents/{agent_id}/slots/{slot_id}/disable", response_model=HostAnswer)
def disable_slot(agent_id: str, slot_id: int, caller: CallerDep) -> dict:
    """The slot takes no new work; the trial shown on it is preempted (a task killed)."""
    with get_database().begin() as conn:
        _switchable(conn, agent_id)
        held = hosts.holdings(conn, agent_id).get(agent_id, [])
        host_switches.disable_slot(conn, caller, agent_id, slot_id, held)
        return _answer(conn, agent_id)
