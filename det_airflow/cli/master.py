"""``det master ...`` and ``det version``: what this client talks to.

det-airflow's master is a plugin of an Airflow API server, so "the master's version" is Airflow's
(its public ``/api/v2/version``), and the master's configuration is Airflow's own ``airflow.cfg``.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.models import MasterLogEntry

CONFIG_SECTION = "[det]"
# `det master logs -f`: how often it asks for new records, and how far back each ask reaches, so
# that a record another process wrote a little after its time is still shown (once).
POLL_INTERVAL = 1.0
FOLLOW_OVERLAP = 10.0


def client_version() -> str:
    """The installed det-airflow's version ("unknown" when it runs from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("det-airflow")
    except PackageNotFoundError:
        return "unknown"


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("master", help="manage master")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    info = verbs.add_parser("info", help="fetch master info")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=_info)

    config = verbs.add_parser("config", help="fetch master config")
    config.add_argument("--json", action="store_true", help="(refused: see the message)")
    config.set_defaults(func=_config)

    logs = verbs.add_parser("logs", help="fetch master logs (admins only)")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="follow the logs of master, similar to tail -f"
    )
    logs.add_argument(
        "--tail",
        type=_count,
        help="number of lines to show, counting from the end of the log (default is all)",
    )
    logs.set_defaults(func=_logs)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of lines, 0 or more")
    return value


def register_version(subparsers: argparse._SubParsersAction) -> None:
    version = subparsers.add_parser("version", help="show version information")
    version.set_defaults(func=_version)


def _master_info(master: str) -> dict[str, Any]:
    from det_airflow.cli.user import connect

    client = connect(master)
    return {
        "master_address": master,
        "airflow_version": client.airflow_version(),
        "user": client.whoami(),
    }


def _info(args: argparse.Namespace) -> None:
    info = _master_info(args.master)
    if args.json:
        render.print_json(info)
        return
    for key, value in info.items():
        print(render.clean(f"{key}: {value if value is not None else 'unknown'}"))


def _config(args: argparse.Namespace) -> None:
    raise DetError(
        f"det master config: det-airflow's master is configured by Airflow's airflow.cfg "
        f"({CONFIG_SECTION} section and AIRFLOW__DET__* variables) on the API server; "
        "read it there (`airflow config list --section det`)"
    )


def _version(args: argparse.Namespace) -> None:
    """Determined's layout: the client, then the master, then its address; a master that cannot be
    reached is said so, the client's part still printed."""
    print("client:")
    print(f"  version: {client_version()}")
    print("master:")
    try:
        from det_airflow.cli.user import connect

        airflow = connect(args.master).airflow_version()
        print(render.clean(f"  airflow_version: {airflow or 'unknown'}"))
    except DetError as exc:
        print(render.clean(f"  unreachable: {exc}"))
    print(render.clean(f"master_address: {args.master}"))


def format_log_entry(entry: MasterLogEntry) -> str:
    """Determined's layout, ``TIME [LEVEL]: MESSAGE``. The message is text logged by the master,
    often holding what users typed: its terminal controls are dropped, and its further lines are
    indented, so that no line of it can pass for a record of its own."""
    message = render.clean(entry.message).replace("\n", "\n    ")
    return f"{render.clean(entry.time)} [{render.clean(entry.level)}]: {message}"


def _seconds(entry: MasterLogEntry) -> float:
    return datetime.fromisoformat(entry.time.replace("Z", "+00:00")).timestamp()


def _logs(args: argparse.Namespace) -> None:
    from det_airflow.cli.user import connect

    client = connect(args.master)
    entries = client.master_logs(tail=args.tail).entries
    for entry in entries:
        print(format_log_entry(entry), flush=args.follow)
    if not args.follow:
        return
    # Records are merged from several processes by time: each ask reaches FOLLOW_OVERLAP back, and
    # those already shown (or older than the first shown) are left out.
    start = _seconds(entries[0]) if entries and args.tail else 0.0
    seen = {(e.process, e.seq, e.time): _seconds(e) for e in entries}
    latest = max(seen.values(), default=start)
    while True:
        time.sleep(POLL_INTERVAL)
        for entry in client.master_logs(since=max(0.0, latest - FOLLOW_OVERLAP)).entries:
            key, at = (entry.process, entry.seq, entry.time), _seconds(entry)
            if key in seen or at < start:
                continue
            seen[key] = at
            latest = max(latest, at)
            print(format_log_entry(entry), flush=True)
        seen = {key: at for key, at in seen.items() if at >= latest - FOLLOW_OVERLAP}
