"""``det shell ...``: an interactive terminal on the cluster, as a task, through the master."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from det_airflow.cli import task as task_cli
from det_airflow.cli.task import SHELL

if TYPE_CHECKING:
    from det_airflow.api.user import UserClient

# Where the master's proxy serves a shell's terminal, under the task's proxy path.
TERMINAL_PATH = "/det/proxy/{id}/ws"


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("shell", help="interactive shells")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    start = verbs.add_parser("start", help="start a shell and open a terminal in it (-d: start only)")
    task_cli.add_launch_arguments(start, SHELL)
    start.add_argument(
        "command", metavar="CMD", nargs="*", help="after --: what each terminal runs (default: a login shell)"
    )
    start.set_defaults(func=_start)

    open_ = verbs.add_parser("open", help="open another terminal in a running shell")
    task_cli.add_id(open_, SHELL)
    open_.add_argument(
        "command", metavar="CMD", nargs="*", help="after --: run this instead of the shell's own command"
    )
    open_.set_defaults(func=_open)

    task_cli.register_common_verbs(verbs, SHELL)


def _start(args: argparse.Namespace) -> int:
    client, task = task_cli.launch(args, SHELL, command=args.command)
    if args.detach:
        return 0
    task = task_cli.wait_until_ready(client, task)
    return _terminal(client, task.id, [])


def _open(args: argparse.Namespace) -> int:
    client = task_cli.connect(args)
    task = task_cli.get_task(client, args.task_id, SHELL)
    task_cli.require_ready(task)
    return _terminal(client, task.id, args.command)


def _terminal(client: UserClient, task_id: int, command: list[str]) -> int:
    from det_airflow.cli.terminal import run_terminal

    params = {"command": command} if command else None
    with client.open_websocket(TERMINAL_PATH.format(id=task_id), params=params) as connection:
        return task_cli.process_status(run_terminal(connection))
