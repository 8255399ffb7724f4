"""``det tensorboard ...``: TensorBoard over experiments' or trials' metrics, as a task."""

from __future__ import annotations

import argparse

from det_airflow.cli import task as task_cli
from det_airflow.cli.task import TENSORBOARD
from det_airflow.errors import DetError


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("tensorboard", help="TensorBoards of experiments and trials")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    start = verbs.add_parser(
        "start", help="start a TensorBoard of experiments (or of trials, with --trial-ids) and open it"
    )
    start.add_argument(
        "experiment_ids", metavar="EXPERIMENT_ID", type=int, nargs="*", help="show every trial of these"
    )
    start.add_argument(
        "-t", "--trial-ids", type=int, nargs="+", default=[], metavar="TRIAL_ID", help="show these trials"
    )
    task_cli.add_launch_arguments(start, TENSORBOARD, context=False)
    task_cli.add_browser_argument(start)
    start.set_defaults(func=_start)

    task_cli.register_open_verb(verbs, TENSORBOARD)
    task_cli.register_common_verbs(verbs, TENSORBOARD)


def _start(args: argparse.Namespace) -> None:
    if not args.experiment_ids and not args.trial_ids:
        raise DetError("a TensorBoard needs something to show: experiment IDs, or trial IDs with --trial-ids")
    client, task = task_cli.launch(
        args, TENSORBOARD, experiment_ids=args.experiment_ids, trial_ids=args.trial_ids
    )
    task_cli.show_page(args, client, task)
