"""``det master ...`` and ``det version``: what this client talks to.

det-airflow's master is a plugin of an Airflow API server, so "the master's version" is Airflow's
(its public ``/api/v2/version``), and the master's configuration is Airflow's own ``airflow.cfg``.
"""

from __future__ import annotations

import argparse
from typing import Any

from det_airflow.cli import render
from det_airflow.errors import DetError

CONFIG_SECTION = "[det]"


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
