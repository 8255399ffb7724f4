"""``det project|p ...``: Determined's projects, which hold experiments (``det e move``) and notes."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.errors import DetError

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

    delete = verbs.add_parser("delete", help="delete project")
    _add_names(delete)
    add_yes(delete)
    delete.set_defaults(func=_delete)

    archive = verbs.add_parser("archive", help="archive project")
    _add_names(archive)
    archive.set_defaults(func=_set_archived, archived=True)

    unarchive = verbs.add_parser("unarchive", help="unarchive project")
    _add_names(unarchive)
    unarchive.set_defaults(func=_set_archived, archived=False)

    edit = verbs.add_parser("edit", help="edit project")
    edit.add_argument("workspace_name", help="current name of the workspace")
    edit.add_argument("project_name", help="name of the project")
    edit.add_argument("--new_name", "--new-name", dest="new_name", help="new name of the project")
    edit.add_argument("--description", help="description of the project")
    edit.add_argument("--json", action="store_true", help="print as JSON")
    edit.set_defaults(func=_edit)


def _add_names(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workspace_name", help="name of the workspace")
    parser.add_argument("project_name", help="name of the project")


def _add_all(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all", "-a", action="store_true", help="show all experiments (including archived and other users')"
    )


def add_yes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", action="store_true", help="automatically answer yes to prompts")


def confirmed(args: argparse.Namespace, question: str, what: str) -> bool:
    """``--yes``, or the user's yes to ``question`` at a terminal; refused without a terminal."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise DetError(f"not deleting {what} without confirmation: pass --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


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


def _delete(args: argparse.Namespace) -> None:
    client = _connect(args)
    project = client.project_by_name(args.workspace_name, args.project_name)
    name = render.clean(args.project_name)
    question = (
        f'Deleting project "{name}" removes it and its notes for good; a project that still holds\n'
        "experiments is not deleted (move or delete them first).\n"
        "For a recoverable alternative, see the 'archive' command. Do you still wish to proceed?"
    )
    if not confirmed(args, question, f"project {name}"):
        print("Aborting project deletion.")
        return
    client.delete_project(project.id)
    print(f"Successfully deleted project {name}.")


def _set_archived(args: argparse.Namespace) -> None:
    client = _connect(args)
    project = client.project_by_name(args.workspace_name, args.project_name)
    client.set_project_archived(project.id, args.archived)
    done = "archived" if args.archived else "un-archived"
    print(f"Successfully {done} project {render.clean(args.project_name)}.")


def _edit(args: argparse.Namespace) -> None:
    client = _connect(args)
    project = client.project_by_name(args.workspace_name, args.project_name)
    changes = {"name": args.new_name, "description": args.description}
    edited = client.update_project(project.id, **{k: v for k, v in changes.items() if v is not None})
    if args.json:
        render.print_json(edited)
    else:
        render.print_table(PROJECT_HEADERS, [project_row(edited)])
