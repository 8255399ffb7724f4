"""``det project|p ...``: Determined's projects, which hold experiments (``det e move``) and notes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render

if TYPE_CHECKING:
    from det_airflow.api.models import Experiment, Project
    from det_airflow.api.user import UserClient

PROJECT_HEADERS = ("ID", "Name", "Description", "# Experiments", "# Active Experiments")
EXPERIMENT_HEADERS = (
    "ID",
    "Owner",
    "Name",
    "Parent ID",
    "State",
    "Progress",
    "Start Time",
    "End Time",
    "Resource Pool",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("project", aliases=["p"], help="manage projects")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", aliases=["ls"], help="list the projects of a workspace")
    ls.add_argument("workspace_name", help="name of the workspace")
    ls.add_argument("--sort-by", choices=("id", "name"), default="id", help="sort projects by this field")
    ls.add_argument("--order-by", choices=("asc", "desc"), default="asc", help="ascending or descending")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list)

    experiments = verbs.add_parser("list-experiments", help="list the experiments of a project")
    _add_names(experiments)
    _add_all(experiments)
    experiments.add_argument("--sort-by", choices=("id", "name"), default="id", help="sort by this field")
    experiments.add_argument(
        "--order-by", choices=("asc", "desc"), default="asc", help="ascending or descending"
    )
    render.add_output_flags(experiments)
    experiments.set_defaults(func=_list_experiments)

    create = verbs.add_parser("create", help="create project")
    create.add_argument("workspace_name", help="name of the workspace")
    create.add_argument("name", help="name of the project")
    create.add_argument("--description", default="", help="description of the project")
    create.add_argument("--json", action="store_true", help="print as JSON")
    create.set_defaults(func=_create)

    describe = verbs.add_parser("describe", help="describe project")
    _add_names(describe)
    _add_all(describe)
    describe.add_argument("--json", action="store_true", help="print as JSON")
    describe.set_defaults(func=_describe, sort_by="id", order_by="asc", csv=False)


def _add_names(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workspace_name", help="name of the workspace")
    parser.add_argument("project_name", help="name of the project")


def _add_all(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all", "-a", action="store_true", help="show all experiments (including archived and other users')"
    )


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def project_row(project: Project) -> list[Any]:
    return [
        project.id,
        project.name,
        project.description,
        project.num_experiments,
        project.num_active_experiments,
    ]


def _experiment_row(experiment: Experiment, *, archived: bool) -> list[Any]:
    row = [
        experiment.id,
        experiment.owner,
        experiment.name,
        experiment.parent_id,
        render.format_state(experiment.state),
        render.format_percent(experiment.progress),
        render.format_time(experiment.start_time),
        render.format_time(experiment.end_time),
        experiment.resource_pool,
    ]
    return [*row, experiment.archived] if archived else row


def _list(args: argparse.Namespace) -> None:
    client = _connect(args)
    projects = client.list_projects(client.workspace_by_name(args.workspace_name).id).projects
    projects.sort(key=lambda p: getattr(p, args.sort_by), reverse=args.order_by == "desc")
    if args.json:
        render.print_json(projects)
        return
    render.print_table(PROJECT_HEADERS, [project_row(p) for p in projects], csv=args.csv)


def _list_experiments(args: argparse.Namespace) -> None:
    client = _connect(args)
    project = client.project_by_name(args.workspace_name, args.project_name)
    experiments = client.list_project_experiments(project.id, all=args.all)
    if not args.all:  # as Determined: without --all, the caller's own experiments
        me = client.whoami()
        experiments = [e for e in experiments if e.owner == me]
    experiments.sort(key=lambda e: getattr(e, args.sort_by), reverse=args.order_by == "desc")
    if args.json:
        render.print_json(experiments)
        return
    headers = [*EXPERIMENT_HEADERS, "Archived"] if args.all else list(EXPERIMENT_HEADERS)
    rows = [_experiment_row(e, archived=args.all) for e in experiments]
    render.print_table(headers, rows, csv=args.csv)


def _create(args: argparse.Namespace) -> None:
    client = _connect(args)
    workspace = client.workspace_by_name(args.workspace_name)
    project = client.create_project(workspace.id, args.name, description=args.description)
    if args.json:
        render.print_json(project)
    else:
        render.print_table(PROJECT_HEADERS, [project_row(project)])


def _describe(args: argparse.Namespace) -> None:
    project = _connect(args).project_by_name(args.workspace_name, args.project_name)
    if args.json:
        render.print_json(project)
        return
    render.print_table(PROJECT_HEADERS, [project_row(project)])
    print("\nAssociated Experiments")
    _list_experiments(args)
