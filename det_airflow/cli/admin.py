"""``det admin ...``: commands for the platform team, run where Airflow's configuration is."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    admin = subparsers.add_parser("admin", help="manage the det tables in Airflow's database")
    verbs = admin.add_subparsers(dest="verb", metavar="VERB", required=True)
    migrate = verbs.add_parser(
        "migrate",
        help="create or upgrade the det tables and the det_default connection (uses $AIRFLOW_HOME)",
    )
    migrate.add_argument("--conn-id", default="det_default", help="Airflow connection for det tasks")
    migrate.add_argument("--master-url", help="address det tasks use to reach the master")
    migrate.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    try:
        from det_airflow.master.admin import migrate
    except ImportError as exc:
        from det_airflow.errors import DetError

        raise DetError(f"`det admin migrate` needs Airflow installed here ({exc})") from None
    for line in migrate(conn_id=args.conn_id, master_url=args.master_url):
        print(line)
    return 0
