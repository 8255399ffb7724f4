"""``det command|cmd ...``: run a program on the cluster as a task and follow its output."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from det_airflow.cli import task as task_cli
from det_airflow.cli.logs import show_trial_logs
from det_airflow.cli.task import COMMAND, COMPLETED, TERMINATED

if TYPE_CHECKING:
    from det_airflow.api.user import Task, UserClient

# The exit status of a command that ended without one of its own (killed before it started, lost).
NO_STATUS = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("command", aliases=["cmd"], help="run programs on the cluster")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    run = verbs.add_parser(
        "run", help="run a command, print its output and exit with its exit status (-d: in the background)"
    )
    task_cli.add_launch_arguments(run, COMMAND)
    run.add_argument("command", metavar="CMD", nargs=argparse.REMAINDER, help="the program and its arguments")
    run.set_defaults(func=_run)

    task_cli.register_common_verbs(verbs, COMMAND)


def _run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    client, task = task_cli.launch(args, COMMAND, command=command)
    if args.detach:
        return 0
    try:
        return follow(client, task)
    except KeyboardInterrupt:
        print(
            f"{task_cli.keeps_running(task)}; `det cmd logs -f {task.id}` follows it again",
            file=sys.stderr,
        )
        raise


def follow(client: UserClient, task: Task) -> int:
    """Prints the command's (or generic task's) output until it ends; answers its exit status."""
    trial_id = task_cli.trial_of(client, task, wait=True)
    if trial_id is not None:
        show_trial_logs(client, trial_id, follow=True)
    while task.state != TERMINATED:
        task = client.get_task(task.id)
        if task.state != TERMINATED:
            time.sleep(task_cli.POLL_INTERVAL)
    status = exit_status(task)
    if status != 0:
        code = "no exit status" if task.exit_code is None else f"exit status {task.exit_code}"
        title = task_cli.KINDS[task.type].title
        print(f"{title} {task.id} ended ({task.end_state}): {code}", file=sys.stderr, flush=True)
    return status


def exit_status(task: Task) -> int:
    """The status ``det cmd run`` exits with: the command's own as a shell reports it (a process
    ended by signal N is 128 + N); without one, 0 only when it completed."""
    if task.exit_code is None:
        return 0 if task.end_state == COMPLETED else NO_STATUS
    return task_cli.process_status(task.exit_code)
