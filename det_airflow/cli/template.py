"""``det template|tpl ...``: Determined's config templates, kept on the master.

A template is a named config fragment; ``det experiment create --template NAME`` has the master lay
it under the experiment's own config (the experiment's values win). Each user names their own
templates; admins set shared ones (``--shared``). NAME means the caller's own template, else the
shared one: exactly what their experiments naming it get, shown in full.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.models import Template
    from det_airflow.api.user import UserClient

LIST_HEADERS = ("Name", "Owner", "Shared", "Updated", "Fields")


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("template", aliases=["tpl"], help="manage config templates")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", aliases=["ls"], help="list your config templates and the shared ones")
    ls.add_argument("-d", "--details", action="store_true", help="show the configs of the templates")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list)

    describe = verbs.add_parser("describe", help="describe config template")
    describe.add_argument("template_name", metavar="TEMPLATE_NAME", help="template name")
    _add_scope(describe)
    describe.set_defaults(func=_describe)

    set_ = verbs.add_parser("set", help="set config template")
    set_.add_argument("template_name", metavar="TEMPLATE_NAME", help="template name")
    set_.add_argument("template_file", metavar="TEMPLATE_FILE", help="the template's YAML file")
    set_.add_argument("--shared", action="store_true", help="the shared template of this name (admins)")
    set_.set_defaults(func=_set)

    remove = verbs.add_parser("remove", aliases=["rm"], help="remove config template")
    remove.add_argument("template_name", metavar="TEMPLATE_NAME", help="template name")
    _add_scope(remove)
    remove.set_defaults(func=_remove)


def _add_scope(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--owner", help="this user's personal template (another's: admins)")
    scope.add_argument("--shared", action="store_true", help="the shared template of this name")


def _what(template: Template) -> str:
    return f"shared template {template.name}" if template.shared else f"template {template.name}"


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _yaml(config: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def _list(args: argparse.Namespace) -> None:
    templates = _connect(args).list_templates()
    if args.json:
        render.print_json(templates)
        return
    headers = [*LIST_HEADERS, "Config"] if args.details else list(LIST_HEADERS)
    rows = []
    for template in templates:
        row: list[Any] = [
            template.name,
            template.owner,
            template.shared,
            render.format_time(template.updated_at),
            ", ".join(template.config),
        ]
        if args.details:
            row.append(_yaml(template.config).rstrip("\n"))
        rows.append(row)
    render.print_table(headers, rows, csv=args.csv)


def _describe(args: argparse.Namespace) -> None:
    template = _connect(args).get_template(args.template_name, owner=args.owner, shared=args.shared)
    # Which template this is, as a YAML comment: the rest is the config, whole.
    whose = "" if template.shared else f" of {template.owner}"
    print(render.clean(f"# {_what(template)}{whose}\n{_yaml(template.config)}"), end="")


def _set(args: argparse.Namespace) -> None:
    try:
        with open(args.template_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise DetError(f"cannot read template file {args.template_file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise DetError(f"template file {args.template_file} is not UTF-8 text") from None
    template = _connect(args).set_template(args.template_name, text, shared=args.shared)
    print(render.clean(f"Set {_what(template)}"))


def _remove(args: argparse.Namespace) -> None:
    _connect(args).remove_template(args.template_name, owner=args.owner, shared=args.shared)
    what = "shared template" if args.shared else "template"
    print(render.clean(f"Removed {what} {args.template_name}"))
