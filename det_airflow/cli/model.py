"""``det model|m ...``: Determined's model registry, where checkpoints are registered as numbered
versions of a named model (a registered checkpoint is never garbage-collected).

A model's name is unique among its owner's models: a NAME means the caller's own model first (else
the only model of that name), ``--owner`` names whose; a number is a model ID. A model lives in a
workspace (Uncategorized unless created with ``-w`` or moved with ``det model move``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.models import Model, ModelVersion
    from det_airflow.api.user import UserClient

MODEL_HEADERS = (
    "ID",
    "Name",
    "Owner",
    "Description",
    "Workspace ID",
    "Creation Time",
    "Last Updated Time",
    "Labels",
    "Archived",
    "Metadata",
)
LIST_HEADERS = ("ID", "Name", "Owner", "Workspace ID", "Creation Time", "Last Updated Time", "Metadata")
VERSION_HEADERS = ("Version #", "Trial ID", "Batch #", "Checkpoint UUID", "Validation Metrics", "Metadata")
SORT_BY = ("name", "description", "creation_time", "last_updated_time")


class ModelArgumentError(DetError):
    """`det model move` arguments that name no single workspace."""


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("model", aliases=["m"], help="manage models")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", aliases=["ls"], help="list all models in the registry")
    ls.add_argument(
        "--sort-by", choices=SORT_BY, default="last_updated_time", help="sort models by this field"
    )
    ls.add_argument("--order-by", choices=("asc", "desc"), default="asc", help="ascending or descending")
    ls.add_argument("--owner", help="only this user's models")
    ls.add_argument("-w", "--workspace-names", help="list models in given list of comma-separated workspaces")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list)

    create = verbs.add_parser("create", help="create model")
    create.add_argument("name", help="name of the model, new among your models")
    create.add_argument("--description", default="", help="description of the model")
    create.add_argument("--label", dest="labels", action="append", default=[], help="a label (repeatable)")
    create.add_argument("-w", "--workspace-name", help="workspace name (default: Uncategorized)")
    create.add_argument("--json", action="store_true", help="print as JSON")
    create.set_defaults(func=_create)

    describe = verbs.add_parser("describe", help="describe model")
    describe.add_argument("name", help="model to describe")
    _add_owner(describe)
    describe.add_argument("--version", type=int, default=0, help="this version too (0: the latest)")
    describe.add_argument("--json", action="store_true", help="print as JSON")
    describe.set_defaults(func=_describe)

    versions = verbs.add_parser("list-versions", help="list the versions of a model")
    versions.add_argument("name", help="name of the model")
    _add_owner(versions)
    render.add_output_flags(versions)
    versions.set_defaults(func=_list_versions)

    reg = verbs.add_parser("register-version", help="register a new version of a model")
    reg.add_argument("name", help="name of the model")
    reg.add_argument("uuid", help="uuid to register as the next version of the model")
    _add_owner(reg)
    reg.add_argument("--json", action="store_true", help="print as JSON")
    reg.set_defaults(func=_register_version)

    delete = verbs.add_parser("delete", help="delete model")
    delete.add_argument("name", help="unique name of the model")
    _add_owner(delete)
    # Determined's `det model delete` asks nothing; --yes is taken so scripts that pass it run.
    delete.add_argument("-y", "--yes", action="store_true", help=argparse.SUPPRESS)
    delete.set_defaults(func=_delete)

    move = verbs.add_parser("move", help="move model to given workspace")
    move.add_argument("name", help="name of model")
    move.add_argument("workspace", nargs="?", metavar="WORKSPACE_NAME", help="the workspace (or -w)")
    move.add_argument("-w", "--workspace-name", help="workspace name")
    _add_owner(move)
    move.set_defaults(func=_move)


def _add_owner(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--owner", help="whose model NAME is (names are unique per owner; default: yours, else the only one)"
    )


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def _print_model(model: Model) -> None:
    values = [
        model.id,
        model.name,
        model.owner,
        model.description,
        model.workspace_id,
        render.format_time(model.creation_time),
        render.format_time(model.last_updated_time),
        ", ".join(model.labels),
        model.archived,
        _dumps(model.metadata),
    ]
    render.print_table(MODEL_HEADERS, [values])


def _version_row(version: ModelVersion) -> list[Any]:
    checkpoint = version.checkpoint
    return [
        version.version,
        checkpoint.trial_id,
        checkpoint.steps_completed,
        checkpoint.uuid,
        _dumps(version.validation_metrics),
        _dumps(checkpoint.metadata),
    ]


def _list(args: argparse.Namespace) -> None:
    workspaces = [w.strip() for w in args.workspace_names.split(",")] if args.workspace_names else None
    models = _connect(args).list_models(
        sort_by=args.sort_by, order_by=args.order_by, owner=args.owner, workspace_name=workspaces
    )
    if args.json:
        render.print_json(models)
        return
    rows = [
        [
            m.id,
            m.name,
            m.owner,
            m.workspace_id,
            render.format_time(m.creation_time),
            render.format_time(m.last_updated_time),
            _dumps(m.metadata),
        ]
        for m in models
    ]
    render.print_table(LIST_HEADERS, rows, csv=args.csv)


def _create(args: argparse.Namespace) -> None:
    fields: dict[str, Any] = {"description": args.description, "labels": args.labels}
    if args.workspace_name:
        fields["workspace_name"] = args.workspace_name
    model = _connect(args).create_model(args.name, **fields)
    if args.json:
        render.print_json(model)
    else:
        _print_model(model)


def _describe(args: argparse.Namespace) -> None:
    client = _connect(args)
    answer = client.list_model_versions(args.name, owner=args.owner)
    if args.json:
        render.print_json(answer.model)
        return
    _print_model(answer.model)
    if answer.model_versions:
        version = client.get_model_version(str(answer.model.id), args.version)
        print()
        render.print_table(VERSION_HEADERS, [_version_row(version)])


def _list_versions(args: argparse.Namespace) -> None:
    answer = _connect(args).list_model_versions(args.name, owner=args.owner)
    if args.json:
        render.print_json(answer)
        return
    if not args.csv:
        _print_model(answer.model)
        print()
    render.print_table(VERSION_HEADERS, [_version_row(v) for v in answer.model_versions], csv=args.csv)


def _register_version(args: argparse.Namespace) -> None:
    client = _connect(args)
    version = client.register_model_version(args.name, args.uuid, owner=args.owner)
    if args.json:
        render.print_json(version)
        return
    _print_model(client.get_model(str(version.model_id)))
    print()
    render.print_table(VERSION_HEADERS, [_version_row(version)])


def _delete(args: argparse.Namespace) -> None:
    """Removes the model and its versions; prints nothing, as Determined's."""
    _connect(args).delete_model(args.name, owner=args.owner)


def _move(args: argparse.Namespace) -> None:
    """Moves the model; prints nothing, as Determined's."""
    if args.workspace and args.workspace_name and args.workspace != args.workspace_name:
        raise ModelArgumentError(
            f"two workspaces given ({args.workspace!r} and -w {args.workspace_name!r}): give one"
        )
    workspace = args.workspace or args.workspace_name
    if not workspace:
        raise ModelArgumentError("give the workspace to move it to: det model move NAME -w WORKSPACE_NAME")
    _connect(args).update_model(args.name, owner=args.owner, workspace_name=workspace)
