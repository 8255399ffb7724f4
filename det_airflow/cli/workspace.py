"""``det workspace|w ...``: Determined's workspaces, which hold projects (``det project``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from det_airflow.cli import render
from det_airflow.cli.project import PROJECT_HEADERS, add_yes, confirmed, project_row

if TYPE_CHECKING:
    from det_airflow.api.models import Workspace
    from det_airflow.api.user import UserClient

WORKSPACE_HEADERS = ("ID", "Name", "# Projects")


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("workspace", aliases=["w"], help="manage workspaces")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", aliases=["ls"], help="list all workspaces")
    ls.add_argument("--sort-by", choices=("id", "name"), default="id", help="sort workspaces by this field")
    ls.add_argument("--order-by", choices=("asc", "desc"), default="asc", help="ascending or descending")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list)

    projects = verbs.add_parser("list-projects", help="list the projects of a workspace")
    projects.add_argument("workspace_name", help="name of the workspace")
    render.add_output_flags(projects)
    projects.set_defaults(func=_list_projects)

    create = verbs.add_parser("create", help="create workspace (admins only)")
    create.add_argument("name", help="unique name of the workspace")
    create.add_argument("--json", action="store_true", help="print as JSON")
    create.set_defaults(func=_create)

    describe = verbs.add_parser("describe", help="describe workspace")
    describe.add_argument("workspace_name", help="name of the workspace")
    describe.add_argument("--json", action="store_true", help="print as JSON")
    describe.set_defaults(func=_describe)

    delete = verbs.add_parser("delete", help="delete workspace")
    delete.add_argument("workspace_name", help="name of the workspace")
    add_yes(delete)
    delete.set_defaults(func=_delete)

    edit = verbs.add_parser("edit", help="edit workspace")
    edit.add_argument("workspace_name", help="current name of the workspace")
    edit.add_argument("--name", help="new name of the workspace")
    edit.add_argument("--json", action="store_true", help="print as JSON")
    edit.set_defaults(func=_edit)

    archive = verbs.add_parser("archive", help="archive workspace")
    archive.add_argument("workspace_name", help="name of the workspace")
    archive.set_defaults(func=_set_archived, archived=True)

    unarchive = verbs.add_parser("unarchive", help="unarchive workspace")
    unarchive.add_argument("workspace_name", help="name of the workspace")
    unarchive.set_defaults(func=_set_archived, archived=False)


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _row(workspace: Workspace) -> list[object]:
    return [workspace.id, workspace.name, workspace.num_projects]


def _list(args: argparse.Namespace) -> None:
    workspaces = sorted(_connect(args).list_workspaces(), key=lambda w: getattr(w, args.sort_by))
    if args.order_by == "desc":
        workspaces.reverse()
    if args.json:
        render.print_json(workspaces)
        return
    render.print_table(WORKSPACE_HEADERS, [_row(w) for w in workspaces], csv=args.csv)


def _list_projects(args: argparse.Namespace) -> None:
    client = _connect(args)
    projects = client.list_projects(client.workspace_by_name(args.workspace_name).id).projects
    if args.json:
        render.print_json(projects)
        return
    render.print_table(PROJECT_HEADERS, [project_row(p) for p in projects], csv=args.csv)


def _create(args: argparse.Namespace) -> None:
    workspace = _connect(args).create_workspace(args.name)
    if args.json:
        render.print_json(workspace)
    else:
        render.print_table(WORKSPACE_HEADERS, [_row(workspace)])


def _describe(args: argparse.Namespace) -> None:
    client = _connect(args)
    answer = client.list_projects(client.workspace_by_name(args.workspace_name).id)
    if args.json:
        render.print_json(answer)
        return
    render.print_table(WORKSPACE_HEADERS, [_row(answer.workspace)])
    print("\nAssociated Projects")
    render.print_table(PROJECT_HEADERS, [project_row(p) for p in answer.projects])


def _delete(args: argparse.Namespace) -> None:
    client = _connect(args)
    workspace = client.workspace_by_name(args.workspace_name)
    name = render.clean(args.workspace_name)
    question = (
        f'Deleting workspace "{name}" removes it and its projects for good; a workspace whose\n'
        "projects still hold experiments is not deleted (move or delete them first).\n"
        "For a recoverable alternative, see the 'archive' command. Do you still wish to proceed?"
    )
    if not confirmed(args, question, f"workspace {name}"):
        print("Aborting workspace deletion.")
        return
    client.delete_workspace(workspace.id)
    print(f"Successfully deleted workspace {name}.")


def _set_archived(args: argparse.Namespace) -> None:
    client = _connect(args)
    client.set_workspace_archived(client.workspace_by_name(args.workspace_name).id, args.archived)
    done = "archived" if args.archived else "un-archived"
    print(f"Successfully {done} workspace {render.clean(args.workspace_name)}.")


def _edit(args: argparse.Namespace) -> None:
    client = _connect(args)
    workspace = client.workspace_by_name(args.workspace_name)
    changes = {"name": args.name} if args.name is not None else {}
    edited = client.update_workspace(workspace.id, **changes)
    if args.json:
        render.print_json(edited)
    else:
        render.print_table(WORKSPACE_HEADERS, [_row(edited)])
