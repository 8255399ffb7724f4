"""``det agent|a list`` and ``det slot|s list``: the worker hosts (Determined's agents), their slots
and the trials holding them, with Determined's columns where det-airflow has the same fact."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.models import Host
    from det_airflow.api.user import UserClient

AGENT_HEADERS = (
    "Agent ID",
    "Registered Time",
    "Num Slots",
    "Used Slots",
    "Slot Type",
    "Alive",
    "Queue",
    "Addresses",
)
SLOT_HEADERS = ("Agent ID", "Slot ID", "Enabled", "Allocation", "Task Name", "Type", "Device")


class AgentArgumentError(DetError):
    """A `det slot list` argument that names no host the master knows."""


def format_hosts(hosts: Iterable[str]) -> str:
    """The hosts a trial or job ran on, as one table cell."""
    return ", ".join(hosts)


def register(subparsers: argparse._SubParsersAction) -> None:
    agent = subparsers.add_parser("agent", aliases=["a"], help="list worker hosts (agents)")
    agent_verbs = agent.add_subparsers(dest="verb", metavar="VERB", required=True)
    agents = agent_verbs.add_parser("list", aliases=["ls"], help="list the worker hosts and their slots")
    render.add_output_flags(agents)
    agents.set_defaults(func=_list_agents)

    slot = subparsers.add_parser("slot", aliases=["s"], help="list the slots of worker hosts")
    slot_verbs = slot.add_subparsers(dest="verb", metavar="VERB", required=True)
    slots = slot_verbs.add_parser("list", aliases=["ls"], help="list every slot and the trial holding it")
    slots.add_argument("--agent", metavar="ID", help="only the slots of this agent (host id)")
    render.add_output_flags(slots)
    slots.set_defaults(func=_list_slots)


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _list_agents(args: argparse.Namespace) -> None:
    hosts = _connect(args).list_agents()
    if args.json:
        render.print_json(hosts)
        return
    render.print_table(AGENT_HEADERS, [agent_row(host) for host in hosts], csv=args.csv)
    if not hosts and not args.csv:
        import sys

        print(NO_HOSTS, file=sys.stderr)


#: What `det agent list` says when no worker host reports: where trials run then.
NO_HOSTS = (
    "No worker hosts report to this master: trials run where Airflow's executor runs its tasks (with "
    "the LocalExecutor of `make quickstart`, on the scheduler's machine), as many at once as their "
    'pool\'s slots allow (`det job list`). Celery workers report here as agents (README, "Scale out").'
)


def agent_row(host: Host) -> list[Any]:
    """One `det agent list` line."""
    return [
        host.id,
        render.format_time(host.registered_time),
        host.num_slots,
        host.used_slots,
        host.slot_type,
        host.alive,
        host.queue,
        host.address or "",
    ]


def _list_slots(args: argparse.Namespace) -> None:
    hosts = select_agent(_connect(args).list_agents(), args.agent)
    if args.json:
        render.print_json([slot for host in hosts for slot in slot_records(host)])
        return
    rows = [slot_row(record) for host in hosts for record in slot_records(host)]
    render.print_table(SLOT_HEADERS, rows, csv=args.csv)


def select_agent(hosts: list[Host], agent_id: str | None) -> list[Host]:
    """``hosts``, or only the one named by ``--agent``; an id the master does not know is an error."""
    if agent_id is None:
        return hosts
    chosen = [host for host in hosts if host.id == agent_id]
    if not chosen:
        known = ", ".join(host.id for host in hosts) or "none"
        raise AgentArgumentError(f"--agent: no agent {agent_id!r} (the master's agents: {known})")
    return chosen


def slot_records(host: Host) -> list[dict[str, Any]]:
    """Each slot of ``host`` with the host's facts it is shown with (its `--json` form)."""
    return [
        {"agent_id": host.id, "enabled": host.alive, "slot_type": host.slot_type}
        | slot.model_dump(mode="json")
        for slot in host.slots
    ]


def slot_row(record: dict[str, Any]) -> list[Any]:
    """One `det slot list` line: an empty Allocation is a free slot."""
    return [
        record["agent_id"],
        record["slot_id"],
        record["enabled"],
        record["trial_id"] if record["trial_id"] is not None else "",
        record["task_name"] or "",
        record["slot_type"],
        record["device"] if record["device"] is not None else "",
    ]
