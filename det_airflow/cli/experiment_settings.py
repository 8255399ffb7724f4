"""``det e set gc-policy`` and ``det e set log-retention``: an experiment's checkpoint garbage
collection policy and how long its ended trials keep their logs, as Determined's verbs set them."""

from __future__ import annotations

import argparse
import pprint
import sys
from typing import TYPE_CHECKING

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.user import UserClient

# Determined's columns for the checkpoints a policy would delete; the metric's name goes below the last.
PREVIEW_HEADERS = ("Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources")
# Determined's bounds on ``--days`` (-1: forever).
MAX_RETENTION_DAYS = 32767
POLICY_FLAGS = (
    ("save_experiment_best", "number of best checkpoints per experiment to save"),
    ("save_trial_best", "number of best checkpoints per trial to save"),
    ("save_trial_latest", "number of latest checkpoints per trial to save"),
)


def add_set_verbs(set_verbs: argparse._SubParsersAction) -> None:
    gc = set_verbs.add_parser("gc-policy", help="set the experiment's checkpoint GC policy and run GC")
    gc.add_argument("experiment_id", metavar="ID", type=int, help="experiment ID to modify")
    for name, help_text in POLICY_FLAGS:
        flag = "--" + name.replace("_", "-")
        gc.add_argument(flag, dest=name, type=_count, required=True, metavar="N", help=help_text)
    gc.add_argument("--yes", action="store_true", help="automatically answer yes to prompts")
    gc.set_defaults(func=_set_gc_policy)

    retention = set_verbs.add_parser("log-retention", help="set `log-retention-days` for an experiment")
    retention.add_argument("experiment_id", metavar="ID", type=int, help="experiment ID")
    which = retention.add_mutually_exclusive_group()
    which.add_argument(
        "--days",
        type=_days,
        metavar="N",
        help=f"days to keep the logs of each ended trial, from its end; -1 to {MAX_RETENTION_DAYS}",
    )
    which.add_argument("--forever", action="store_true", help="keep the logs forever")
    retention.set_defaults(func=_set_log_retention)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of checkpoints >= 0, got {text!r}")
    return value


def _days(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not -1 <= value <= MAX_RETENTION_DAYS:
        raise argparse.ArgumentTypeError(f"expected -1 (forever) to {MAX_RETENTION_DAYS} days, got {text!r}")
    return value


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _set_gc_policy(args: argparse.Namespace) -> int:
    """Determined's flow: without ``--yes``, show what the policy would delete and ask; then store
    it, which deletes at once what it no longer keeps."""
    policy = {name: getattr(args, name) for name, _ in POLICY_FLAGS}
    client = _connect(args)
    if not args.yes:
        _print_preview(client, args.experiment_id, policy)
        if not sys.stdin.isatty():
            raise DetError(
                f"not changing the GC policy of experiment {args.experiment_id} without confirmation: "
                "pass --yes"
            )
        answer = input(
            "Changing the checkpoint garbage collection policy of an experiment may result\n"
            "in the unrecoverable deletion of checkpoints.  Do you wish to proceed? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborting operations.")
            return 0
    done = client.set_gc_policy(args.experiment_id, policy)
    print(f"Set GC policy of experiment {args.experiment_id} to\n{pprint.pformat(policy)}")
    if done.deleted:
        print(f"Deleted {len(done.deleted)} checkpoints: {', '.join(done.deleted)}")
    for what in done.not_removed:
        print(render.clean(f"not removed: {what}"), file=sys.stderr)
    return 1 if done.not_removed else 0


def _print_preview(client: UserClient, experiment_id: int, policy: dict[str, int]) -> None:
    preview = client.preview_gc(experiment_id, policy)
    validated = [c for c in preview.checkpoints if c.validation_metric is not None]
    if validated:
        print("The following checkpoints with validation will be deleted by applying this GC Policy:")
        headers = [
            *PREVIEW_HEADERS[:-3],
            f"Validation Metric\n({preview.metric_name})",
            *PREVIEW_HEADERS[-2:],
        ]
        render.print_table(
            headers,
            [
                [
                    c.trial_id,
                    c.steps_completed,
                    render.format_state(c.state),
                    c.validation_metric,
                    c.uuid,
                    "\n".join(sorted(c.resources or {})),
                ]
                for c in validated
            ],
        )
    print(
        f"This policy will delete {len(validated)} checkpoints with validations and "
        f"{len(preview.checkpoints) - len(validated)} checkpoints without validations."
    )


def _set_log_retention(args: argparse.Namespace) -> None:
    if not args.forever and args.days is None:
        raise DetError(
            "give --days N (days to keep the logs from the end of each trial, e.g. "
            f"`det e set log-retention {args.experiment_id} --days 50`) or --forever"
        )
    days = -1 if args.forever else args.days
    _connect(args).set_log_retention(args.experiment_id, days)
    kept = "forever" if days == -1 else f"for {days} days after each trial ends"
    print(f"Set log retention of experiment {args.experiment_id}: logs are kept {kept}")
