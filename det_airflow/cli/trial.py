"""``det trial|t ...``: a trial's logs and description."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from det_airflow.cli import checkpoint as checkpoint_cli
from det_airflow.cli import render
from det_airflow.cli.agent import format_hosts
from det_airflow.cli.logs import add_log_arguments, show_logs_from_args

if TYPE_CHECKING:
    from det_airflow.api.user import UserClient

DESCRIBE_HEADERS = (
    "Trial ID",
    "Experiment ID",
    "State",
    "H-Params",
    "Started",
    "Ended",
    "# of Batches",
    "Restarts",
    "Latest Checkpoint",
    "Hosts",
)
METRICS_HEADERS = ("# of Batches", "Group", "Report Time", "Metrics")


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("trial", aliases=["t"], help="inspect trials")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    logs = verbs.add_parser("logs", help="show a trial's logs")
    _add_id(logs)
    add_log_arguments(logs)
    logs.set_defaults(func=_logs)

    describe = verbs.add_parser("describe", help="show a trial")
    _add_id(describe)
    describe.add_argument("--metrics", action="store_true", help="also list every metrics report")
    describe.add_argument(
        "--states", action="store_true", help="also list every state the trial took, when and why"
    )
    out = describe.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV")
    out.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(func=_describe)

    kill = verbs.add_parser("kill", help="stop a trial at once (no checkpoint)")
    _add_id(kill)
    kill.set_defaults(func=_kill)

    download = verbs.add_parser("download", help="download a checkpoint of a trial")
    _add_id(download)
    which = download.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the checkpoint with the best validation")
    which.add_argument("--latest", action="store_true", help="the most recent checkpoint")
    which.add_argument("--uuid", type=checkpoint_cli.checkpoint_uuid, help="this checkpoint of the trial")
    download.add_argument("-o", "--output-dir", metavar="DIR", help="default: checkpoints/UUID")
    download.add_argument("-q", "--quiet", action="store_true", help="only print the path to the checkpoint")
    download.set_defaults(func=_download)


def _add_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trial_id", metavar="ID", type=int, help="trial ID")


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _kill(args: argparse.Namespace) -> None:
    _connect(args).kill_trial(args.trial_id)
    print(f"Killed trial {args.trial_id}")


def _download(args: argparse.Namespace) -> None:
    from pathlib import Path

    from det_airflow.errors import DetError

    client = _connect(args)
    trial = client.get_trial(args.trial_id)
    done = [
        c
        for c in client.list_checkpoints(trial.experiment_id)
        if c.trial_id == trial.id and render.format_state(c.state) == "COMPLETED"
    ]
    if args.uuid:
        chosen = next((c for c in done if c.uuid == args.uuid), None)
        if chosen is None:
            raise DetError(f"trial {trial.id} has no completed checkpoint {args.uuid}")
    elif not done:
        raise DetError(f"trial {trial.id} has no completed checkpoint")
    elif args.latest:
        chosen = max(done, key=lambda c: c.steps_completed)
    else:
        smaller = checkpoint_cli.smaller_is_better(client.get_experiment_config(trial.experiment_id))
        ranked = checkpoint_cli.best_first(done, smaller)
        if not ranked:
            raise DetError(f"trial {trial.id} has no checkpoint with a validation metric: use --latest")
        chosen = ranked[0]
    target = Path(args.output_dir) if args.output_dir else Path("checkpoints") / chosen.uuid
    checkpoint_cli.download(client, chosen, target)
    if not args.quiet:
        print("Local checkpoint path:")
    print(target)


def _logs(args: argparse.Namespace) -> None:
    show_logs_from_args(_connect(args), args.trial_id, args)


def _describe(args: argparse.Namespace) -> None:
    client = _connect(args)
    trial = client.get_trial(args.trial_id)
    metrics = client.trial_metrics(args.trial_id) if args.metrics else None
    changes = client.state_changes("trial", args.trial_id) if args.states else None
    if args.json:
        answer: dict[str, Any] = {"trial": trial}
        if metrics is not None:
            answer["metrics"] = metrics
        if changes is not None:
            answer["state_changes"] = changes
        render.print_json(answer)
        return
    row: list[Any] = [
        trial.id,
        trial.experiment_id,
        render.format_state(trial.state),
        render.format_json_cell(trial.hparams or {}),
        render.format_time(trial.start_time),
        render.format_time(trial.end_time),
        trial.total_batches,
        trial.restarts,
        trial.latest_checkpoint,
        format_hosts(trial.hosts),
    ]
    render.print_table(DESCRIBE_HEADERS, [row], csv=args.csv)
    if changes is not None:
        render.print_state_changes(changes, csv=args.csv)
    if metrics is None:
        return
    if not args.csv:
        print("\nMetrics:")
    render.print_table(
        METRICS_HEADERS,
        [
            [
                m.steps_completed,
                m.group,
                render.format_time(m.report_time),
                render.format_json_cell(m.metrics or {}),
            ]
            for m in metrics
        ],
        csv=args.csv,
    )
