"""``det template|tpl ...``: Determined's config templates, which det-airflow does not keep.

A template is a config fragment the master merges into experiments that name it. det-airflow's
master stores none, so every verb says where the same settings go instead (the config file, or
``--config key=value`` on ``det e create``) rather than pretending to keep one.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from det_airflow.errors import DetError

NOT_SUPPORTED = (
    "config templates are not supported by det-airflow: put the settings in the experiment's "
    "config file, or pass them with `det e create --config key=value`"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("template", aliases=["tpl"], help="manage config templates")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_text, takes in (
        ("list", "list config templates", ()),
        ("describe", "describe config template", ("template_name",)),
        ("set", "set config template", ("template_name", "template_file")),
        ("remove", "remove config template", ("template_name",)),
    ):
        parser = verbs.add_parser(verb, aliases=["ls"] if verb == "list" else [], help=help_text)
        for name in takes:
            parser.add_argument(name, metavar=name.upper())
        parser.set_defaults(func=_refuse)


def _refuse(args: argparse.Namespace) -> NoReturn:
    raise DetError(NOT_SUPPORTED)
