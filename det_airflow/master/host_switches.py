"""Worker hosts and slots an admin takes out of service (Determined's ``det agent|slot
enable|disable``), kept in ``det_host_switches``.

A disabled host or slot gets no new trial: placement (master/placement.py) counts its slots as not
there, so a host whose every slot is disabled is full while the others take the work. As in
Determined, disabling a host also stops what runs on it, and ``--drain`` lets that finish instead;
disabling one slot stops the trial shown on it. Stopping is the job queue's preemption: a trial is
asked to checkpoint and exit (``should_preempt()``), goes back to waiting without counting a
restart, and resumes from its checkpoint on an enabled host; a trial admitted there but not started
loses its admission, drained or not (it is new work). A notebook, TensorBoard, command or shell
has no checkpoint to resume from: it is killed, as Determined kills it. Enabling a host enables
its slots too, as in Determined. Only admins switch hosts and slots.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow.master import experiments, schema
from det_airflow.master.authz import Caller, PermissionDenied
from det_airflow.master.lifecycle import NotFound, StateError, now
from det_airflow.master.queue_policy import BETWEEN_RUNS
from det_airflow.states import TrialState

# The states of a trial whose program has started: preempting asks it to checkpoint and exit.
_STARTED = (TrialState.PULLING, TrialState.STARTING, TrialState.RUNNING)


class Switch:
    """What an admin disabled of one host (everything enabled when there is no row)."""

    def __init__(self, row: Row | None) -> None:
        self.enabled = True if row is None else bool(row.enabled)
        self.draining = False if row is None else bool(row.draining)
        self.disabled_slots = frozenset() if row is None else frozenset(int(s) for s in row.disabled_slots)

    def slot_enabled(self, slot_id: int) -> bool:
        return self.enabled and slot_id not in self.disabled_slots

    def disabled_count(self, slots: int) -> int:
        """How many of the host's ``slots`` take no new work."""
        if not self.enabled:
            return slots
        return sum(1 for s in self.disabled_slots if 0 <= s < slots)

    def slot_order(self, slots: int) -> list[int]:
        """The order in which the trials a host holds are shown on its slots: enabled slots first,
        so a disabled slot shows a trial only while the host holds more than its enabled slots."""
        return sorted(range(slots), key=lambda s: (not self.slot_enabled(s), s))


def switches(conn: Connection, host_ids: Iterable[str] | None = None) -> dict[str, Switch]:
    """Host id -> its switch, for the hosts with something disabled (all of them, or ``host_ids``)."""
    table = schema.host_switches
    query = select(table)
    if host_ids is not None:
        query = query.where(table.c.host_id.in_(list(host_ids)))
    return {row.host_id: Switch(row) for row in conn.execute(query)}


def switch_of(conn: Connection, host_id: str) -> Switch:
    return switches(conn, [host_id]).get(host_id, Switch(None))


def disabled_devices(conn: Connection, host_id: str) -> list[int]:
    """The devices behind the slots an admin disabled one by one on ``host_id`` (slot ``i`` is the
    host's ``i``-th reported device): a trial starting there leases none of them, so the GPU an
    admin took out of service gets no new work. A disabled host gets no trial at all (placement)."""
    switch = switch_of(conn, host_id)
    if not switch.disabled_slots:
        return []
    row = conn.execute(select(schema.hosts.c.devices).where(schema.hosts.c.id == host_id)).first()
    devices = [] if row is None else list(row.devices or [])
    return [int(devices[s]) for s in sorted(switch.disabled_slots) if 0 <= s < len(devices)]


def preemption_cause(conn: Connection, host_ids: Iterable[str | None]) -> str | None:
    """Why a trial that ran on ``host_ids`` was preempted, when an admin's switch explains it: its
    host disabled, or a slot of it (the trial's state history says so rather than "the job
    queue"); None when nothing there is disabled now."""
    named = sorted({host for host in host_ids if host})
    switched = switches(conn, named)
    for host in named:
        if host in switched and not switched[host].enabled:
            return f"preempted: agent '{host}' was disabled"
    for host in named:
        if host in switched and switched[host].disabled_slots:
            return f"preempted: a slot of agent '{host}' was disabled"
    return None


def _check_admin(caller: Caller, what: str) -> None:
    if not caller.is_admin:
        raise PermissionDenied(f"user '{caller.name}' may not {what}: only admins may")


def _host(conn: Connection, host_id: str) -> Row:
    row = conn.execute(select(schema.hosts).where(schema.hosts.c.id == host_id)).first()
    if row is None:
        known = ", ".join(conn.execute(select(schema.hosts.c.id).order_by(schema.hosts.c.id)).scalars())
        raise NotFound(f"agent '{host_id}' not found (the master's agents: {known or 'none'})")
    return row


def _store(conn: Connection, caller: Caller, host_id: str, switch: Switch) -> None:
    table = schema.host_switches
    conn.execute(table.delete().where(table.c.host_id == host_id))
    if switch.enabled and not switch.disabled_slots:
        return  # nothing disabled: no row
    conn.execute(
        table.insert().values(
            host_id=host_id,
            enabled=switch.enabled,
            draining=switch.draining,
            disabled_slots=sorted(switch.disabled_slots),
            changed_by=caller.name,
            changed_at=now(),
        )
    )


def _changed(
    switch: Switch,
    *,
    enabled: bool | None = None,
    draining: bool | None = None,
    slots: frozenset[int] | None = None,
) -> Switch:
    new = Switch(None)
    new.enabled = switch.enabled if enabled is None else enabled
    new.draining = switch.draining if draining is None else draining
    new.disabled_slots = switch.disabled_slots if slots is None else slots
    return new


def enable_agent(conn: Connection, caller: Caller, host_id: str) -> None:
    """The host and every slot of it take work again (Determined enables its slots with it)."""
    _check_admin(caller, f"enable agent '{host_id}'")
    _host(conn, host_id)
    _store(conn, caller, host_id, Switch(None))


def disable_agent(
    conn: Connection, caller: Caller, host_id: str, held: list[tuple[int, int, int]], *, drain: bool
) -> list[int]:
    """The host takes no new work; what runs there (``held``: hosts.holdings of the host) stops
    unless ``drain``. Returns the trials asked to stop (or killed)."""
    _check_admin(caller, f"disable agent '{host_id}'")
    _host(conn, host_id)
    _store(conn, caller, host_id, _changed(switch_of(conn, host_id), enabled=False, draining=drain))
    _revoke_unstarted(conn, [trial for trial, _, _ in held])
    return [] if drain else _stop(conn, held)


def _check_slot(host: Row, slot_id: int) -> None:
    if not 0 <= slot_id < host.slots:
        slots = f"0 to {host.slots - 1}" if host.slots > 1 else "0" if host.slots else "none"
        raise NotFound(f"agent '{host.id}' has no slot {slot_id} (its slots: {slots})")


def enable_slot(conn: Connection, caller: Caller, host_id: str, slot_id: int) -> None:
    _check_admin(caller, f"enable slot {slot_id} of agent '{host_id}'")
    _check_slot(_host(conn, host_id), slot_id)
    switch = switch_of(conn, host_id)
    _store(conn, caller, host_id, _changed(switch, slots=switch.disabled_slots - {slot_id}))


def disable_slot(
    conn: Connection, caller: Caller, host_id: str, slot_id: int, held: list[tuple[int, int, int]]
) -> list[int]:
    """The slot takes no new work and the trial shown on it (of ``held``: hosts.holdings of the
    host) stops (Determined kills the container on a slot disabled). Returns the trials asked to
    stop (or killed)."""
    _check_admin(caller, f"disable slot {slot_id} of agent '{host_id}'")
    host = _host(conn, host_id)
    _check_slot(host, slot_id)
    switch = switch_of(conn, host_id)
    if slot_id in switch.disabled_slots:
        return []  # disabled already: what it showed was stopped then
    on_slot = {
        slot: holder for slot, holder in zip(switch.slot_order(host.slots), _per_slot(held), strict=False)
    }
    after = _changed(switch, slots=switch.disabled_slots | {slot_id})
    _store(conn, caller, host_id, after)
    victims = [on_slot[slot_id]] if slot_id in on_slot else []
    # The host may still hold more than its enabled slots (a trial shown on a slot disabled
    # before): the newest go too, until what stays fits.
    room = host.slots - after.disabled_count(host.slots)
    staying = [h for h in held if h not in victims]
    while staying and sum(gang for _, _, gang in staying) > room:
        victims.append(staying.pop())
    _revoke_unstarted(conn, [trial for trial, _, _ in victims])
    return _stop(conn, victims)


def _per_slot(held: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """One entry per slot held, in holding order: a trial of a gang of n holds n slots."""
    return [holder for holder in held for _ in range(holder[2])]


def _revoke_unstarted(conn: Connection, trial_ids: list[int]) -> None:
    """Trials admitted onto the host but not started lose their admission: placed again, elsewhere."""
    if not trial_ids:
        return
    trials = schema.trials
    conn.execute(
        trials.update()
        .where(trials.c.id.in_(trial_ids), trials.c.state.in_([s.value for s in BETWEEN_RUNS]))
        .values(admitted_run=trials.c.run_id, admitted_at=None)
    )


def _stop(conn: Connection, held: list[tuple[int, int, int]]) -> list[int]:
    """Preempt the trials that run (the job queue's path: checkpoint, exit, resume elsewhere);
    kill the tasks, which cannot resume. Returns the trials stopped."""
    if not held:
        return []
    trials = schema.trials
    task_ids = experiments.task_ids(conn, sorted({exp for _, exp, _ in held}))
    trial_ids = [trial for trial, exp, _ in held if exp not in task_ids]
    if trial_ids:
        conn.execute(
            trials.update()
            .where(
                trials.c.id.in_(trial_ids),
                trials.c.state.in_([s.value for s in _STARTED]),
                trials.c.preempt_requested_at.is_(None),
            )
            .values(preempt_requested_at=now())
        )
    from det_airflow.master import experiment_state  # it reaches the searches, which reach the hosts

    for task_id in sorted(task_ids):
        try:
            experiment_state.change_state(conn, task_id, "kill")
        except StateError:
            pass  # stopping already
    return [trial for trial, _, _ in held]


def describe(switch: Switch) -> dict[str, Any]:
    """The host's own fields of `det agent list` (``api.models.Host``)."""
    return {"enabled": switch.enabled, "draining": switch.draining and not switch.enabled}
