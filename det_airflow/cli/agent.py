"""``det agent|a list`` and ``det slot|s list``: the worker hosts (Determined's agents), their slots
and the trials holding them, with Determined's columns where det-airflow has the same fact; ``det
agent enable|disable [--drain]`` and ``det slot enable|disable``: an admin takes a host or one slot
out of service and back (master/host_switches.py says what happens to the work there)."""

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
    "Enabled",
    "Draining",
    "Queue",
    "Addresses",
)
SLOT_HEADERS = ("Agent ID", "Slot ID", "Enabled", "Draining", "Allocation", "Task Name", "Type", "Device")
DRAINING_HEADERS = ("Allocation ID", "Name", "Slots Needed", "Agent")


class AgentArgumentError(DetError):
    """A `det slot list` or `det agent enable|disable` argument that names no host the master knows."""


def format_hosts(hosts: Iterable[str]) -> str:
    """The hosts a trial or job ran on, as one table cell."""
    return ", ".join(hosts)


def register(subparsers: argparse._SubParsersAction) -> None:
    agent = subparsers.add_parser("agent", aliases=["a"], help="list worker hosts (agents)")
    agent_verbs = agent.add_subparsers(dest="verb", metavar="VERB", required=True)
    agents = agent_verbs.add_parser("list", aliases=["ls"], help="list the worker hosts and their slots")
    render.add_output_flags(agents)
    agents.set_defaults(func=_list_agents)
    for action in ("enable", "disable"):
        verb = agent_verbs.add_parser(action, help=f"{action} agent")
        which = verb.add_mutually_exclusive_group()
        which.add_argument("agent_id", nargs="?", help="agent ID (a worker host's id)")
        which.add_argument("--all", action="store_true", help=f"{action} all agents")
        if action == "disable":
            verb.add_argument(
                "--drain",
                action="store_true",
                help="enter drain mode, allowing the tasks currently running on the disabled agents "
                "to finish. will also print these tasks, if any",
            )
            render.add_output_flags(verb)
        verb.set_defaults(func=_switch_agent, enable=action == "enable")

    slot = subparsers.add_parser("slot", aliases=["s"], help="list the slots of worker hosts")
    slot_verbs = slot.add_subparsers(dest="verb", metavar="VERB", required=True)
    slots = slot_verbs.add_parser("list", aliases=["ls"], help="list every slot and the trial holding it")
    slots.add_argument("--agent", metavar="ID", help="only the slots of this agent (host id)")
    render.add_output_flags(slots)
    slots.set_defaults(func=_list_slots)
    for action in ("enable", "disable"):
        verb = slot_verbs.add_parser(action, help=f"{action} slot on agent")
        verb.add_argument("agent_id", help="agent ID")
        verb.add_argument("slot_id", type=int, help="slot ID")
        verb.set_defaults(func=_switch_slot, enable=action == "enable")


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
        host.enabled,
        host.draining,
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
        {"agent_id": host.id, "slot_type": host.slot_type}
        | slot.model_dump(mode="json")
        # A slot takes work while its host reports and an admin has not disabled it.
        | {"enabled": host.alive and slot.enabled}
        for slot in host.slots
    ]


def slot_row(record: dict[str, Any]) -> list[Any]:
    """One `det slot list` line: an empty Allocation is a free slot."""
    return [
        record["agent_id"],
        record["slot_id"],
        record["enabled"],
        record["draining"],
        record["trial_id"] if record["trial_id"] is not None else "",
        record["task_name"] or "",
        record["slot_type"],
        record["device"] if record["device"] is not None else "",
    ]


def _switch_agent(args: argparse.Namespace) -> None:
    """As Determined's: one line on stderr per agent; after ``--drain``, what still runs there."""
    import sys

    action = "enable" if args.enable else "disable"
    if not (args.all or args.agent_id):
        raise AgentArgumentError(
            f"Please pass agent id or --all option. See `det agent {action} --help` for details."
        )
    client = _connect(args)
    agent_ids = [args.agent_id] if args.agent_id else sorted(host.id for host in client.list_agents())
    drain = not args.enable and args.drain
    answers = []
    for agent_id in agent_ids:
        answers.append(client.switch_agent(agent_id, args.enable, drain=drain))
        print(f"{'Enabled' if args.enable else 'Disabled'} agent {agent_id}.", file=sys.stderr)
    if not drain:
        return
    running = [record for host in answers for record in _allocations(host)]
    if args.json:
        render.print_json(running)
        return
    if not args.csv:
        print(
            "Tasks still in progress on draining nodes."
            if running
            else "No tasks in progress on draining nodes."
        )
    render.print_table(
        DRAINING_HEADERS,
        [[r["allocation_id"], r["name"], r["slots_needed"], r["agent"]] for r in running],
        csv=args.csv,
    )


def _allocations(host: Host) -> list[dict[str, Any]]:
    """The trials holding slots of ``host``, one record each with the slots it holds there."""
    found: dict[int, dict[str, Any]] = {}
    for slot in host.slots:
        if slot.trial_id is None:
            continue
        record = found.setdefault(
            slot.trial_id,
            {
                "allocation_id": slot.trial_id,
                "name": slot.task_name or "",
                "slots_needed": 0,
                "agent": host.id,
            },
        )
        record["slots_needed"] += 1
    return list(found.values())


def _switch_slot(args: argparse.Namespace) -> None:
    _connect(args).switch_slot(args.agent_id, args.slot_id, args.enable)
    print(f"{'Enabled' if args.enable else 'Disabled'} slot {args.slot_id} of agent {args.agent_id}")
