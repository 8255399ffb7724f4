"""``det user login|logout|whoami``: the Airflow login the CLI uses with a master."""

from __future__ import annotations

import argparse
import os

from det_airflow.errors import DetError


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("user", help="log in to and out of a master")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    login = verbs.add_parser("login", help="log in (an Airflow user) and remember the token")
    login.add_argument("username", nargs="?", help="default: $DET_USER, else asked")
    login.set_defaults(func=_login)

    logout = verbs.add_parser("logout", help="forget the token stored for this master")
    logout.set_defaults(func=_logout)

    whoami = verbs.add_parser("whoami", help="show who the master thinks you are")
    whoami.set_defaults(func=_whoami)


def _login(args: argparse.Namespace) -> None:
    from det_airflow.api import user as api

    username = args.username or os.environ.get(api.USER_ENV)
    if not username:
        try:
            username = input("Username: ").strip()
        except EOFError:
            username = ""
        if not username:
            raise DetError("no username given: det user login USERNAME")
    password = os.environ.get(api.PASSWORD_ENV)
    if password is None:
        import getpass

        try:
            password = getpass.getpass(f"Password for user '{username}': ")
        except EOFError:
            raise DetError("no password given: type it when asked, or set DET_PASS") from None
    token = api.login(args.master, username, password)
    api.store_login(args.master, username, token)


def _logout(args: argparse.Namespace) -> None:
    from det_airflow.api.user import forget_login

    forget_login(args.master)


def _whoami(args: argparse.Namespace) -> None:
    from det_airflow.api.user import connect

    print(f"You are logged in as user '{connect(args.master).whoami()}'")
