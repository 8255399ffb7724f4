"""``det token ...``: access tokens. det-airflow's are Airflow's JWTs from ``POST /auth/token``.

Airflow keeps no list of the tokens it issued, so ``list`` and ``describe`` have nothing to show;
``create`` prints the stored login's token (renewed when it expired) and ``revoke`` takes a token
itself (Airflow's tokens have no other id) and revokes it through Airflow's logout.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from det_airflow.errors import DetError

WHY = (
    "Airflow keeps no list of the tokens it issues: a token lasts until it expires "
    "([api_auth] jwt_expiration_time in airflow.cfg) or is revoked (det token revoke TOKEN, det user logout)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("token", help="manage access tokens")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    create = verbs.add_parser("create", help="print an access token of the logged-in user")
    create.add_argument("username", nargs="?", help="(must be the logged-in user, or det -u USER)")
    create.set_defaults(func=_create)

    revoke = verbs.add_parser("revoke", help="revoke a token (the token itself: Airflow's have no id)")
    revoke.add_argument("token", metavar="TOKEN", help="the token, or - to read it from stdin")
    revoke.set_defaults(func=_revoke)

    for verb, takes in (("list", None), ("describe", "token_id")):
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


def _revoke(args: argparse.Namespace) -> None:
    from det_airflow.api.user import forget_login, load_login, revoke

    token = sys.stdin.read().strip() if args.token == "-" else args.token.strip()
    if not token:
        raise DetError("det token revoke: no token given")
    outcome = revoke(args.master, token)
    if outcome == "refused":
        raise DetError("det token revoke: the master does not accept this token (expired, or not its own)")
    if outcome == "kept":
        raise DetError("det token revoke: the master still accepts this token after Airflow's logout")
    stored = load_login(args.master)
    if stored is not None and stored.token == token:
        forget_login(args.master)
    print("Token revoked")


def _refuse(args: argparse.Namespace) -> NoReturn:
    raise DetError(f"det token {args.verb}: {WHY}")
