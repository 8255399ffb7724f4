"""``det job|j ...``: the job queue, and ``det e set`` on the same changes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.cli.agent import format_hosts
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.models import Job

LIST_HEADERS = (
    "#",
    "ID",
    "Type",
    "Job Name",
    "Priority",
    "Submitted",
    "Slots (acquired/needed)",
    "State",
    "User",
    "Hosts",
)
# `update-batch ID.KEY=VALUE` keys and `det e set` fields, as the route names them.
BATCH_KEYS = {
    "priority": "priority",
    "weight": "weight",
    "max-slots": "max_slots",
    "resource-pool": "resource_pool",
    "ahead-of": "ahead_of",
    "behind-of": "behind_of",
}
HIDDEN = "(hidden)"  # a job the caller may not read


class JobArgumentError(DetError):
    """A `det job` argument that does not name a valid change."""


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("job", aliases=["j"], help="the job queue")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    listing = verbs.add_parser(
        "list", aliases=["ls"], help="list waiting and running jobs in scheduling order"
    )
    listing.add_argument("-p", "--resource-pool", help="only this resource pool (Airflow pool)")
    listing.add_argument("--limit", type=_positive_int, help="show at most this many jobs")
    out = listing.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV")
    out.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_list)

    update = verbs.add_parser("update", help="change one job's place in the queue")
    update.add_argument("job_id", metavar="JOB", type=int, help="job ID (the experiment ID)")
    change = update.add_mutually_exclusive_group(required=True)
    change.add_argument("-p", "--priority", type=_priority, help="1-99, lower runs first")
    change.add_argument("-w", "--weight", type=_positive_float, help="fair-share weight, above 0")
    change.add_argument("--resource-pool", help="move the job's waiting trials to this Airflow pool")
    change.add_argument("--ahead-of", type=int, metavar="JOB2", help="place the job just before JOB2")
    change.add_argument("--behind-of", type=int, metavar="JOB2", help="place the job just after JOB2")
    update.set_defaults(func=_update)

    batch = verbs.add_parser("update-batch", help="apply several changes at once (all or none)")
    batch.add_argument(
        "changes",
        nargs="+",
        metavar="ID.KEY=VALUE",
        help=f"KEY one of {', '.join(k for k in BATCH_KEYS if k != 'max-slots')}",
    )
    batch.set_defaults(func=_update_batch)


def add_queue_fields(fields: argparse._SubParsersAction) -> None:
    """`det e set priority|weight|max-slots ID VALUE`, beside the other `det e set` fields."""
    for name, kind in (("priority", _priority), ("weight", _positive_float), ("max-slots", _positive_int)):
        sub = fields.add_parser(name, help=f"set the experiment's {name} in the job queue")
        sub.add_argument("experiment_id", metavar="ID", type=int, help="experiment ID")
        sub.add_argument("value", metavar="VALUE", type=kind)
        sub.set_defaults(func=_set, key=BATCH_KEYS[name])


def _number(text: str, kind: type, what: str, low: float, high: float | None = None) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low or (high is not None and value > high) or (kind is float and value == low):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    return int(_number(text, int, "an integer >= 1", 1))


def _priority(text: str) -> int:
    return int(_number(text, int, "a priority 1-99 (lower runs first)", 1, 99))


def _positive_float(text: str) -> float:
    return float(_number(text, float, "a weight above 0", 0))


def _connect(args: argparse.Namespace) -> Any:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _list(args: argparse.Namespace) -> None:
    jobs = _connect(args).list_jobs(resource_pool=args.resource_pool, limit=args.limit)
    if args.json:
        render.print_json(jobs)
        return
    render.print_table(LIST_HEADERS, [list_row(job) for job in jobs], csv=args.csv)


def list_row(job: Job) -> list[Any]:
    """One `det job list` line; a job whose gang can never fit its pool, or no live host, says so
    in its slots."""
    slots = f"{job.acquired_slots}/{job.needed_slots}"
    if not job.fits_pool:
        slots += f" (needs {job.slots_per_trial} per trial: never fits pool '{job.resource_pool}')"
    elif job.fits_hosts is False:
        slots += (
            f" (needs {job.slots_per_trial} per trial: waits for hosts that can take it, one with that"
            f" many slots or several with equal shares; the largest live host has {job.largest_host_slots}"
            " enabled)"
        )
    return [
        job.jobs_ahead,
        job.id,
        job.type,
        job.name if job.name is not None else HIDDEN,
        job.priority,
        render.format_time(job.submitted),
        slots,
        job.state + (f" ({job.preempting_trials} preempting)" if job.preempting_trials else ""),
        job.user if job.user is not None else HIDDEN,
        format_hosts(job.hosts),
    ]


def _update(args: argparse.Namespace) -> None:
    change = {
        key: getattr(args, key)
        for key in ("priority", "weight", "resource_pool", "ahead_of", "behind_of")
        if getattr(args, key) is not None
    }
    _connect(args).update_jobs([{"job_id": args.job_id, **change}])
    print(f"Updated job {args.job_id}")


def parse_batch(items: list[str]) -> list[dict[str, Any]]:
    """`ID.KEY=VALUE` items to route updates, checked before anything is sent."""
    converters: dict[str, Callable[[str], Any]] = {
        "priority": _priority,
        "weight": _positive_float,
        "max_slots": _positive_int,
        "resource_pool": str,
        "ahead_of": int,
        "behind_of": int,
    }
    updates = []
    for item in items:
        target, sep, value = item.partition("=")
        job, dot, key = target.partition(".")
        if not sep or not dot or not job.isdigit() or key not in BATCH_KEYS or not value:
            raise JobArgumentError(
                f"'{item}': expected ID.KEY=VALUE with KEY one of {', '.join(BATCH_KEYS)} (e.g. 12.priority=10)"
            )
        field = BATCH_KEYS[key]
        try:
            converted = converters[field](value)
        except (ValueError, argparse.ArgumentTypeError):
            raise JobArgumentError(f"'{item}': {value!r} is not a valid {key}") from None
        updates.append({"job_id": int(job), field: converted})
    return updates


def _update_batch(args: argparse.Namespace) -> None:
    updates = parse_batch(args.changes)
    _connect(args).update_jobs(updates)
    print(f"Updated {len(updates)} job{'s' if len(updates) != 1 else ''}")


def _set(args: argparse.Namespace) -> None:
    _connect(args).update_jobs([{"job_id": args.experiment_id, args.key: args.value}])
    print(f"Set {args.field} of experiment {args.experiment_id} to {args.value}")
