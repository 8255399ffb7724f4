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
    install = verbs.add_parser(
        "install-dags",
        help="write det_experiments.py, which turns experiment YAMLs into DAGs, into a DAGs folder",
    )
    install.add_argument("dags_folder", metavar="DAGS_FOLDER", help="Airflow's [core] dags_folder")
    install.add_argument("--force", action="store_true", help="replace a det_experiments.py that differs")
    install.set_defaults(func=_install_dags)


def _migrate(args: argparse.Namespace) -> int:
    try:
        from det_airflow.master.admin import migrate
    except ImportError as exc:
        from det_airflow.errors import DetError

        raise DetError(f"`det admin migrate` needs Airflow installed here ({exc})") from None
    for line in migrate(conn_id=args.conn_id, master_url=args.master_url):
        print(line)
    return 0


def _install_dags(args: argparse.Namespace) -> int:
    from pathlib import Path

    from det_airflow.dag_loader import install

    print(install(Path(args.dags_folder).expanduser(), force=args.force))
    return 0
