"""Where an admitted trial runs: the host that takes its whole gang of slots, or, for a trial
larger than every host, the hosts that take it together.

The job queue (master/queue_policy.py) decides which trials of a pool may hold slots; placement
decides on which of the live hosts, as Determined's ``fitting_policy: best``: the host whose free
slots the gang fills most tightly, so that a job asking for a whole host still finds one free while
small trials fill the gaps. A gang that fits some host is never split; one larger than every host
runs as ``k`` nodes of ``slots / k`` slots each (the fewest nodes that have room, each on its best
fit), as Determined spreads a multi-agent trial evenly. No host is given more slots than it
reported, so a slot is never leased twice, and none is given a slot an admin disabled (``det
agent|slot disable``, master/host_switches.py): a disabled host counts as one with no slots, so it
is full while the others take the work. Pure functions of what the hosts hold, like the queue
policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from det_airflow.runner_policy import runner_of


@dataclass(frozen=True)
class HostLoad:
    """A live host as placement sees it: the slots it reported, those its trials hold and those
    an admin disabled (all of them for a disabled host)."""

    id: str
    slots: int
    used: int = 0
    disabled: int = 0

    @property
    def enabled_slots(self) -> int:
        """The slots it may be given work on: a trial still running on a disabled slot (a
        draining host) holds one of these in ``used`` until it ends."""
        return max(self.slots - self.disabled, 0)

    @property
    def free(self) -> int:
        return max(self.enabled_slots - self.used, 0)


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
    return any(host.enabled_slots >= gang for host in hosts)


#: The most nodes one trial runs on: the experiment's DAG has a node task for each of them.
MAX_NODES = 8


def placed_on_hosts(config: Mapping[str, Any]) -> bool:
    """Whether the experiment's trials take the slots of worker hosts: not a Kubernetes trial,
    whose pods the cluster places (its task only submits and watches them)."""
    return runner_of(config) != "kubernetes"


@dataclass(frozen=True)
class Node:
    """One node of a placed gang: a host and the slots the trial holds there."""

    host: str
    slots: int


def node_ranks(gang: int) -> list[int]:
    """The ranks of a gang's nodes other than the chief, at most: the experiment's DAG has one node
    task per slot and rank (none for a one-slot gang, which never spans hosts)."""
    return list(range(1, min(gang, MAX_NODES)))


def node_map_index(slot: int, rank: int, gang: int) -> int:
    """The map index of slot ``slot``'s node task of ``rank``: Airflow maps ``expand(slot=...,
    rank=...)`` over every pair, the last argument varying fastest."""
    return slot * len(node_ranks(gang)) + rank - 1


def node_counts(gang: int) -> list[int]:
    """The numbers of nodes a gang larger than every host may be split into, fewest first: each
    node holds the same number of slots."""
    return [k for k in range(2, min(gang, MAX_NODES) + 1) if gang % k == 0]


def place_gang(hosts: Sequence[HostLoad], gang: int, prefer: str | None = None) -> list[Node] | None:
    """The nodes of a trial of ``gang`` slots, chief first: one host that takes it whole (best fit)
    when any host is that large; else the fewest hosts that take equal shares of it now, each the
    tightest fit for its share. None when it cannot be placed now."""
    if fits_any(hosts, gang):
        host = best_fit(hosts, gang, prefer)
        return None if host is None else [Node(host, gang)]
    for count in node_counts(gang):
        share = gang // count
        room = sorted(
            (host for host in hosts if host.free >= share), key=lambda h: (h.free, h.id != prefer, h.id)
        )
        if len(room) >= count:
            chosen = room[:count]
            # The asking task's host, when it is one of them, is the chief: its task need not move.
            chosen.sort(key=lambda h: h.id != prefer)
            return [Node(host.id, share) for host in chosen]
    return None


def fits_together(hosts: Iterable[HostLoad], gang: int) -> bool:
    """Whether the hosts could ever take the gang, whole on one or split over several (when all
    their trials have ended)."""
    hosts = list(hosts)
    if fits_any(hosts, gang):
        return True
    return any(sum(host.enabled_slots >= gang // k for host in hosts) >= k for k in node_counts(gang))


def place(hosts: Sequence[HostLoad], gangs: Sequence[int]) -> list[str | None]:
    """Place trials one after another in the given (queue) order, each on its best fit among what
    the earlier ones left; None for a trial that finds no room."""
    loads = {host.id: host for host in hosts}
    placed: list[str | None] = []
    for gang in gangs:
        host_id = best_fit(loads.values(), gang)
        if host_id is not None:
            host = loads[host_id]
            loads[host_id] = replace(host, used=host.used + gang)
        placed.append(host_id)
    return placed
