"""Where an admitted trial runs: the host that takes its whole gang of slots.

The job queue (master/queue_policy.py) decides which trials of a pool may hold slots; placement
decides on which of the live hosts, as Determined's ``fitting_policy: best``: the host whose free
slots the gang fills most tightly, so that a job asking for a whole host still finds one free while
small trials fill the gaps. No host is given more slots than it reported, so a slot is never
leased twice. Pure functions of what the hosts hold, like the queue policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostLoad:
    """A live host as placement sees it: the slots it reported and those its trials hold."""

    id: str
    slots: int
    used: int = 0

    @property
    def free(self) -> int:
        return max(self.slots - self.used, 0)


def best_fit(hosts: Iterable[HostLoad], gang: int, prefer: str | None = None) -> str | None:
    """The host for a trial of ``gang`` slots: of those with enough free slots, the one left with
    the fewest; between equally good hosts ``prefer`` (where the asking task already runs, which
    saves moving it), then the host id, so decisions repeat. None when no host has room now."""
    chosen: HostLoad | None = None
    best: tuple[int, bool, str] | None = None
    for host in hosts:
        if host.free < gang:
            continue
        key = (host.free, host.id != prefer, host.id)
        if best is None or key < best:
            chosen, best = host, key
    return None if chosen is None else chosen.id


def fits_any(hosts: Iterable[HostLoad], gang: int) -> bool:
    """Whether some host could ever take the gang whole (when all its trials have ended)."""
    return any(host.slots >= gang for host in hosts)


def place(hosts: Sequence[HostLoad], gangs: Sequence[int]) -> list[str | None]:
    """Place trials one after another in the given (queue) order, each on its best fit among what
    the earlier ones left; None for a trial that finds no room."""
    loads = {host.id: host for host in hosts}
    placed: list[str | None] = []
    for gang in gangs:
        host_id = best_fit(loads.values(), gang)
        if host_id is not None:
            host = loads[host_id]
            loads[host_id] = HostLoad(host.id, host.slots, host.used + gang)
        placed.append(host_id)
    return placed
