"""``det token ...``: access tokens. det-airflow's are Airflow's JWTs from ``POST /auth/token``.

Airflow keeps no list of the tokens it issued and cannot revoke one before it expires, so only
``create`` (the stored login's token, renewed when it expired) has a meaning here.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from det_airflow.errors import DetError

WHY = (
    "Airflow keeps no list of the tokens it issues and cannot revoke one: a token lasts until it "
    "expires ([api_auth] jwt_expiration_time in airflow.cfg)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("token", help="manage access tokens")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    create = verbs.add_parser("create", help="print an access token of the logged-in user")
    create.add_argument("username", nargs="?", help="(must be the logged-in user, or det -u USER)")
    create.set_defaults(func=_create)

    for verb, takes in (("list", None), ("describe", "token_id"), ("revoke", "token_id")):
        parser = verbs.add_parser(verb, aliases=["ls"] if verb == "list" else [], help=f"{verb} tokens")
        if takes:
            parser.add_argument(takes, metavar="TOKEN_ID")
        parser.set_defaults(func=_refuse)


def _create(args: argparse.Namespace) -> None:
    from det_airflow.cli.user import connect

    client = connect(args.master)
    who = client.whoami()  # renews an expired login first, so the token printed works
    if args.username and args.username != who:
        raise DetError(
            f"det token create: a token for '{args.username}' needs that user's login: "
            f"det -u {args.username} token create"
        )
    token = client.fresh_token()
    if not token:
        raise DetError("not logged in: run `det user login` first")
    print(token)


def _refuse(args: argparse.Namespace) -> NoReturn:
    raise DetError(f"det token {args.verb}: {WHY}")
