"""The worker hosts (Determined's agents): their heartbeats, what they hold, where trials go.

Each worker host reports its slots every few seconds (det_airflow/celery_config.py); a host whose
last report is older than ``[det] host_timeout`` seconds offers nothing. While some host is alive,
the job queue's admission also places the trial (master/placement.py) on one of them and records
it in ``det_trials.host``; the trial's task is sent to that host's Celery queue. With no host
reporting (one machine, LocalExecutor) nothing is placed and admission is the pool's alone; `det
agent list` then shows that one machine (:func:`local_host`). An admin may disable a host or some
of its slots (master/host_switches.py): placement gives them no new trial.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, Row, or_, select

from det_airflow import airflow_compat, settings
from det_airflow.hosts import inventory
from det_airflow.master import host_switches, schema
from det_airflow.master.lifecycle import now
from det_airflow.master.placement import HostLoad
from det_airflow.master.queue_policy import BETWEEN_RUNS, RUNNING_STATES, holds_and_waits
from det_airflow.master.serialize import iso


def report(conn: Connection, host_id: str, inventory: dict[str, Any]) -> Row:
    """Record a host's heartbeat: its inventory, seen now."""
    table = schema.hosts
    values = {**inventory, "last_seen": now()}
    if conn.execute(select(table.c.id).where(table.c.id == host_id)).first() is None:
        conn.execute(table.insert().values(id=host_id, registered_at=values["last_seen"], **values))
    else:
        conn.execute(table.update().where(table.c.id == host_id).values(**values))
    return conn.execute(select(table).where(table.c.id == host_id)).one()


def leave(conn: Connection, host_id: str) -> bool:
    """The host stops offering slots (its worker shut down); False when it was not known."""
    table = schema.hosts
    return bool(conn.execute(table.delete().where(table.c.id == host_id)).rowcount)  # type: ignore[attr-defined]


_TIMEOUT_READ_EVERY_S = 10.0
_timeout_read: tuple[float, timedelta] | None = None


def _timeout() -> timedelta:
    """``[det] host_timeout``, read again every few seconds: placement asks for it at each admission."""
    global _timeout_read
    at = time.monotonic()
    if _timeout_read is None or at - _timeout_read[0] > _TIMEOUT_READ_EVERY_S:
        _timeout_read = (at, timedelta(seconds=settings.load().host_timeout))
    return _timeout_read[1]


def is_alive(row: Row) -> bool:
    seen = (
        row.last_seen if row.last_seen.tzinfo else row.last_seen.replace(tzinfo=UTC)
    )  # SQLite keeps no zone
    return bool(seen >= now() - _timeout())


def all_hosts(conn: Connection) -> list[Row]:
    return list(conn.execute(select(schema.hosts).order_by(schema.hosts.c.id)))


def live_hosts(conn: Connection) -> list[Row]:
    table = schema.hosts
    since = now() - _timeout()
    return list(conn.execute(select(table).where(table.c.last_seen >= since).order_by(table.c.id)))


def holdings(conn: Connection, host_id: str | None = None) -> dict[str, list[tuple[int, int, int]]]:
    """Host id -> the trials placed on it that hold slots now: (trial id, experiment id, slots);
    every host's, or ``host_id``'s alone. A multi-node trial holds its share on each of its nodes."""
    trials, exps = schema.trials, schema.experiments
    # A host's own heartbeat reads its trials and the (few) multi-node ones, not every host's.
    placed = (
        trials.c.host.is_not(None)
        if host_id is None
        else or_(trials.c.host == host_id, trials.c.nodes.is_not(None))
    )
    rows = conn.execute(
        select(
            trials.c.id,
            trials.c.experiment_id,
            trials.c.host,
            trials.c.nodes,
            trials.c.state,
            trials.c.run_id,
            trials.c.admitted_run,
            trials.c.pause_requested,
            trials.c.stop_requested,
            exps.c.state.label("exp_state"),
        )
        .join(exps, exps.c.id == trials.c.experiment_id)
        .where(
            placed,
            trials.c.state.in_([s.value for s in (*RUNNING_STATES, *BETWEEN_RUNS)]),
        )
        .order_by(trials.c.id)
    )
    holding = [
        row
        for row in rows
        if holds_and_waits(
            row.exp_state, row.state, row.admitted_run > row.run_id, row.pause_requested, row.stop_requested
        )[0]
    ]
    gangs = _gangs(conn, {row.experiment_id for row in holding if not row.nodes})
    held: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for row in holding:
        if row.nodes:
            for node in row.nodes:
                held[node["host"]].append((row.id, row.experiment_id, int(node["slots"])))
        else:
            held[row.host].append((row.id, row.experiment_id, gangs[row.experiment_id]))
    if host_id is not None:
        return {host_id: held[host_id]} if held.get(host_id) else {}
    return held


def _gangs(conn: Connection, experiment_ids: set[int]) -> dict[int, int]:
    """Experiment id -> the slots each of its trials holds (one config read per experiment)."""
    if not experiment_ids:
        return {}
    exps = schema.experiments
    rows = conn.execute(select(exps.c.id, exps.c.config).where(exps.c.id.in_(sorted(experiment_ids))))
    return {
        exp_id: max(1, int(config.get("resources", {}).get("slots_per_trial", 1))) for exp_id, config in rows
    }


def loads(conn: Connection, held: dict[str, list[tuple[int, int, int]]] | None = None) -> list[HostLoad]:
    """The live hosts with the slots their trials hold and those an admin disabled, as placement
    sees them (none, at the cost of one query, where no host reports). A disabled host is still
    one: trials wait for an enabled one rather than run wherever Airflow puts them. ``held``: the
    :func:`holdings` of every host, when the caller has them already."""
    live = live_hosts(conn)
    if not live:
        return []
    held = holdings(conn) if held is None else held
    switched = host_switches.switches(conn)
    return [
        HostLoad(
            row.id,
            row.slots,
            sum(gang for _, _, gang in held.get(row.id, ())),
            switched[row.id].disabled_count(row.slots) if row.id in switched else 0,
        )
        for row in live
    ]


def is_live(conn: Connection, host_id: str) -> bool:
    table = schema.hosts
    since = now() - _timeout()
    found = conn.execute(select(table.c.id).where(table.c.id == host_id, table.c.last_seen >= since))
    return found.first() is not None


def gone_hosts(conn: Connection) -> dict[str, str]:
    """Host id -> when it was last seen, for the hosts whose heartbeat stopped."""
    table = schema.hosts
    since = now() - _timeout()
    rows = conn.execute(select(table.c.id, table.c.last_seen).where(table.c.last_seen < since))
    return {host_id: f"last seen {iso(seen)}" for host_id, seen in rows}


def queue_of(conn: Connection, host_id: str) -> str | None:
    return conn.execute(select(schema.hosts.c.queue).where(schema.hosts.c.id == host_id)).scalar()


#: When the master started: the local host's registered time (:func:`local_host`).
_STARTED = now()


def runs_tasks_here() -> bool:
    """Airflow's default executor is the LocalExecutor: its scheduler's machine runs every task,
    which in a one-machine deployment (`make quickstart`) is the master's."""
    executor = airflow_compat.conf.get("core", "executor", fallback="") or ""
    default = executor.split(",")[0].strip().rpartition(":")[2]  # an alias ``name:path`` names its class last
    return default.rpartition(".")[2] == "LocalExecutor"


def local_host(conn: Connection) -> SimpleNamespace | None:
    """The one machine of a LocalExecutor deployment, as a host that reports no heartbeat: this
    machine's inventory (``[det] host_id``, its slots) seen now; None where some host has reported
    or tasks run on an executor's workers. It holds every trial that holds slots (the trials there
    are recorded under the name of the machine their task ran on)."""
    if not runs_tasks_here() or conn.execute(select(schema.hosts.c.id).limit(1)).first() is not None:
        return None
    host_id, report = inventory()
    # As a row of schema.hosts reads; no Celery queue sends it tasks.
    return SimpleNamespace(
        **{**report.model_dump(), "queue": ""}, id=host_id, registered_at=_STARTED, last_seen=now()
    )


def describe(conn: Connection, host_id: str | None = None) -> list[dict[str, Any]]:
    """Every known host (or only ``host_id``) with its slots and the trials holding them, as
    `det agent list` and `det slot list` show them (``api.models.Host``), with what an admin
    disabled. Trials are shown on enabled slots first (a slot is a count here, not a device).
    Where no host reports and tasks run on the LocalExecutor, the list is the master's machine."""
    held = holdings(conn, host_id)
    table = schema.hosts
    rows: list[Any] = (
        all_hosts(conn) if host_id is None else list(conn.execute(select(table).where(table.c.id == host_id)))
    )
    if host_id is None and not rows and (local := local_host(conn)) is not None:
        rows = [local]
        held = {local.id: [hold for holds in held.values() for hold in holds]}
    switched = host_switches.switches(conn, None if host_id is None else [host_id])
    result = []
    for row in rows:
        switch = switched.get(row.id, host_switches.Switch(None))
        taken = [(trial, exp) for trial, exp, gang in held.get(row.id, ()) for _ in range(gang)]
        shown = dict(zip(switch.slot_order(row.slots), taken, strict=False))
        devices = list(row.devices or [])
        slots = []
        for index in range(row.slots):
            trial, exp = shown.get(index, (None, None))
            slots.append(
                {
                    "slot_id": index,
                    "device": devices[index] if index < len(devices) else None,
                    "trial_id": trial,
                    "experiment_id": exp,
                    "task_name": f"Trial {trial} (Experiment {exp})" if trial is not None else None,
                    "enabled": switch.slot_enabled(index),
                    "draining": switch.draining and not switch.enabled,
                }
            )
        result.append(
            {
                **host_switches.describe(switch),
                "id": row.id,
                "registered_time": iso(row.registered_at),
                "last_seen": iso(row.last_seen),
                "alive": is_alive(row),
                "slot_type": row.slot_type,
                "num_slots": row.slots,
                "used_slots": min(len(taken), row.slots),
                "queue": row.queue,
                "address": row.address,
                "slots": slots,
            }
        )
    return result
