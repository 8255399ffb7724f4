"""``det e download ID``: the experiment's best checkpoints, each into ``OUTPUT_DIR/UUID``, fetched
as ``det checkpoint download`` fetches one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from det_airflow.cli import checkpoint as checkpoint_cli
from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.user import Checkpoint, UserClient

# Determined's description of each downloaded checkpoint, one row.
HEADERS = (
    "Experiment ID",
    "Trial ID",
    "Steps Completed",
    "Report Time",
    "Checkpoint UUID",
    "Validation Metrics",
    "Metadata",
)


def register(verbs: argparse._SubParsersAction) -> None:
    download = verbs.add_parser("download", help="download the best checkpoints of an experiment")
    download.add_argument("experiment_id", metavar="ID", type=int, help="experiment ID to download")
    download.add_argument(
        "-o",
        "--output-dir",
        default="checkpoints",
        metavar="DIR",
        help="top folder: each checkpoint goes to DIR/UUID (default: checkpoints)",
    )
    download.add_argument(
        "--top-n",
        type=checkpoint_cli._positive_int,
        default=1,
        metavar="N",
        help="how many checkpoints, best first by the searcher metric (default: 1)",
    )
    download.add_argument(
        "--sort-by",
        metavar="METRIC",
        help="the validation metric to rank by: the experiment's searcher metric, the one its "
        "checkpoints record (needs --smaller-is-better)",
    )
    download.add_argument(
        "--smaller-is-better",
        type=_boolean,
        metavar="true|false",
        help="the order for --sort-by, e.g. false for accuracy",
    )
    download.add_argument(
        "-q", "--quiet", action="store_true", help="only print the paths to the checkpoints"
    )
    checkpoint_cli.add_mode_argument(download)
    download.set_defaults(func=_download)


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("y", "yes", "t", "true", "on", "1"):
        return True
    if value in ("n", "no", "f", "false", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def ranked_checkpoints(client: UserClient, args: argparse.Namespace) -> tuple[str | None, list[Checkpoint]]:
    """The searcher metric, and the experiment's COMPLETED checkpoints best first: those with a
    validation of it by it (the searcher's order, or ``--smaller-is-better``), then the rest, latest
    first."""
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise DetError("--sort-by and --smaller-is-better go together: give both or neither")
    config = client.get_experiment_config(args.experiment_id)
    metric = (config.get("searcher") or {}).get("metric")
    if args.sort_by is not None and args.sort_by != metric:
        raise DetError(
            render.clean(
                f"checkpoints of experiment {args.experiment_id} record the searcher metric "
                f"'{metric}' only: cannot rank them by '{args.sort_by}'"
            )
        )
    smaller = (
        checkpoint_cli.smaller_is_better(config) if args.smaller_is_better is None else args.smaller_is_better
    )
    done = [
        c for c in client.list_checkpoints(args.experiment_id) if render.format_state(c.state) == "COMPLETED"
    ]
    best = checkpoint_cli.best_first(done, smaller)
    rest = sorted(
        (c for c in done if c.validation_metric is None), key=lambda c: c.steps_completed, reverse=True
    )
    return metric, [*best, *rest]


def _download(args: argparse.Namespace) -> None:
    client = _connect(args)
    metric, ranked = ranked_checkpoints(client, args)
    chosen = ranked[: args.top_n]
    if not chosen:
        raise DetError(f"experiment {args.experiment_id} has no completed checkpoint to download")
    top = Path(args.output_dir)
    if top.exists() and not top.is_dir():
        raise DetError(f"--output-dir {args.output_dir}: it is a file")
    top.mkdir(parents=True, exist_ok=True)
    for c in chosen:
        target = top / c.uuid
        checkpoint_cli.download(client, c, target, args.mode)
        if args.quiet:
            print(target)
            continue
        print("Local checkpoint path:")
        print(target, "\n")
        validation = {metric: c.validation_metric} if c.validation_metric is not None else None
        row = [
            c.experiment_id,
            c.trial_id,
            c.steps_completed,
            render.format_time(c.report_time),
            c.uuid,
            render.format_json_cell(validation) if validation else None,
            render.format_json_cell(c.metadata or {}),
        ]
        render.print_table(HEADERS, [row])
        print()
