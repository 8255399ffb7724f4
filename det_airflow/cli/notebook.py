"""``det notebook ...``: JupyterLab as a task, opened through the master's proxy."""

from __future__ import annotations

import argparse

from det_airflow.cli import task as task_cli
from det_airflow.cli.task import NOTEBOOK


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("notebook", help="JupyterLab notebooks")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    start = verbs.add_parser("start", help="start a notebook and open it in the browser")
    task_cli.add_launch_arguments(start, NOTEBOOK)
    task_cli.add_browser_argument(start)
    start.set_defaults(func=_start)

    task_cli.register_open_verb(verbs, NOTEBOOK)
    task_cli.register_common_verbs(verbs, NOTEBOOK)


def _start(args: argparse.Namespace) -> None:
    client, task = task_cli.launch(args, NOTEBOOK)
    task_cli.show_page(args, client, task)
