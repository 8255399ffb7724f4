"""``det user ...``: the Airflow login the CLI uses with a master, and Determined's user verbs.

Users are Airflow's (its auth manager decides who may do what). Under FAB's auth manager, `list`,
`create` and `change-password` go through its user API; elsewhere, and for `deactivate` (which FAB's
API cannot do), the verbs say where that is done instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import quote

from det_airflow.cli import render
from det_airflow.errors import APIError, DetError

if TYPE_CHECKING:
    from det_airflow.api.user import UserClient

LIST_HEADERS = ("Username", "Active")
# Where Airflow's default (simple) auth manager keeps its users and their generated passwords.
USERS_SETTING = "[core] simple_auth_manager_users"
PASSWORDS_SETTING = "[core] simple_auth_manager_passwords_file"
_MANAGED_BY_AIRFLOW = {
    "create": f"add NAME:ROLE to {USERS_SETTING} in airflow.cfg and restart the API server "
    f"(its password is generated into {PASSWORDS_SETTING})",
    "change-password": f"edit the user's password in the file named by {PASSWORDS_SETTING} "
    "and restart the API server",
    "deactivate": f"remove the user from {USERS_SETTING} in airflow.cfg and restart the API server",
    "activate": f"add the user to {USERS_SETTING} in airflow.cfg and restart the API server",
    "rename": f"rename the user in {USERS_SETTING} in airflow.cfg and restart the API server",
    "edit": f"change the user's entry in {USERS_SETTING} in airflow.cfg and restart the API server",
}


_FAB_WAY = {
    "deactivate": "untick Is Active on the user's page under Security > List Users",
    "activate": "tick Is Active on the user's page under Security > List Users",
    "rename": "change the username on the user's page under Security > List Users",
    "edit": "change the user on its page under Security > List Users (or `airflow users ...`)",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("user", aliases=["u"], help="manage users")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    login = verbs.add_parser("login", help="log in (an Airflow user) and remember the token")
    login.add_argument("username", nargs="?", help="default: $DET_USER, else asked")
    login.set_defaults(func=_login)

    logout = verbs.add_parser("logout", help="forget the token stored for this master")
    logout.set_defaults(func=_logout)

    whoami = verbs.add_parser("whoami", help="show who the master thinks you are")
    whoami.set_defaults(func=_whoami)

    ls = verbs.add_parser("list", aliases=["ls"], help="list users (all of them under FAB's auth manager)")
    ls.set_defaults(func=_list)

    create = verbs.add_parser("create", help="create a user (FAB's auth manager)")
    create.add_argument("username", metavar="USERNAME")
    create.add_argument("--admin", action="store_true", help="give the user FAB's Admin role, else User")
    create.set_defaults(func=_create)

    change = verbs.add_parser("change-password", help="change a password (FAB's auth manager)")
    change.add_argument("username", metavar="USERNAME", nargs="?", help="default: the logged-in user")
    change.set_defaults(func=_change_password)

    deactivate = verbs.add_parser("deactivate", help="deactivate a user (done in Airflow's auth manager)")
    deactivate.add_argument("username", metavar="USERNAME")
    deactivate.set_defaults(func=_managed_by_airflow)

    activate = verbs.add_parser("activate", help="activate a user (done in Airflow's auth manager)")
    activate.add_argument("username", metavar="USERNAME")
    activate.set_defaults(func=_managed_by_airflow)

    rename = verbs.add_parser("rename", help="rename a user (done in Airflow's auth manager)")
    rename.add_argument("target_user", metavar="TARGET_USER", help="the user to rename")
    rename.add_argument("new_username", metavar="NEW_USERNAME")
    rename.set_defaults(func=_managed_by_airflow)

    edit = verbs.add_parser("edit", help="change a user's settings (done in Airflow's auth manager)")
    edit.add_argument("target_user", metavar="TARGET_USER")
    edit.add_argument("--display-name", help="(Airflow keeps users' names)")
    edit.add_argument("--username", help="(Airflow keeps usernames)")
    edit.add_argument("--active", choices=("true", "false"), help="(Airflow keeps who is active)")
    edit.add_argument("--admin", choices=("true", "false"), help="(Airflow's roles decide)")
    edit.set_defaults(func=_managed_by_airflow)


# The user of ``det -u USER`` for this command; None: the stored login (set by ``main`` each run).
_acting_user: str | None = None


def act_as(username: str | None) -> None:
    """Makes every client of this command act as ``username`` (``det -u``), or as the stored login."""
    global _acting_user
    _acting_user = username or None


def connect(master: str) -> UserClient:
    """A client for ``master`` that, on a terminal, asks for the password again if the login expired;
    as the user of ``det -u`` when one was given."""
    from det_airflow.api.user import connect as connect_api
    from det_airflow.api.user import connect_as

    ask = _ask_password if sys.stdin.isatty() else None
    if _acting_user is not None:
        return connect_as(master, _acting_user, ask_password=ask)
    return connect_api(master, ask_password=ask)


def _ask_password(username: str) -> str:
    import getpass

    try:
        return getpass.getpass(f"Password for user '{username}': ")
    except EOFError:
        raise DetError("no password given: type it when asked, or set DET_PASS") from None


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
        password = _ask_password(username)
    token = api.login(args.master, username, password)
    api.store_login(args.master, username, token)


def _logout(args: argparse.Namespace) -> None:
    """Revokes the stored token through Airflow's logout, then forgets it. The token is forgotten
    even when the master cannot be reached; then it stays valid until it expires, and this says so."""
    from det_airflow.api.user import forget_login, load_login, revoke

    stored = load_login(args.master)
    if stored is None:
        return
    try:
        outcome = revoke(args.master, stored.token)
        why = {"revoked": "", "refused": "", "kept": "the master still accepts it"}[outcome]
    except APIError as exc:
        outcome, why = "kept", str(exc)
    forget_login(args.master)
    if why:
        print(
            render.clean(
                f"Warning: logged out here, but the token was not revoked ({why}): "
                "it stays valid until it expires"
            ),
            file=sys.stderr,
        )


def _whoami(args: argparse.Namespace) -> None:
    print(render.clean(f"You are logged in as user '{connect(args.master).whoami()}'"))


def _list(args: argparse.Namespace) -> None:
    from det_airflow.api.user import NotFab

    client = connect(args.master)
    try:
        users = client.fab_users("GET", params={"limit": 1000})["users"]
    except NotFab:
        render.print_table(LIST_HEADERS, [[client.whoami(), True]])
        print(
            f"Airflow's auth manager keeps the other users (simple auth manager: {USERS_SETTING}).",
            file=sys.stderr,
        )
        return
    render.print_table(
        (*LIST_HEADERS, "Admin"),
        [
            [
                u["username"],
                bool(u.get("active", True)),
                any(r["name"] == "Admin" for r in u.get("roles") or []),
            ]
            for u in users
        ],
    )


def _new_password(username: str) -> str:
    """Asked twice on a terminal; else the first line of standard input (for scripts)."""
    import getpass

    if sys.stdin.isatty():
        first = getpass.getpass(f"New password for user '{username}': ")
        if first != getpass.getpass("Confirm password: "):
            raise DetError("the two passwords differ; nothing was changed")
    else:
        first = sys.stdin.readline().rstrip("\r\n")
    if not first:
        raise DetError(f"no password given for user '{username}': type it when asked, or pipe it in")
    return first


def _create(args: argparse.Namespace) -> None:
    from det_airflow.api.user import NotFab

    client = connect(args.master)
    role = "Admin" if args.admin else "User"
    try:
        client.fab_users("GET", params={"limit": 1})  # FAB's, and may this login manage users?
    except NotFab:
        _managed_by_airflow(args)
    body = {
        "username": args.username,
        # FAB requires these; Determined users have only a name.
        "first_name": args.username,
        "last_name": role,
        "email": f"{args.username}@users.invalid",
        "roles": [{"name": role}],
        "password": _new_password(args.username),
    }
    client.fab_users("POST", json=body)
    print(render.clean(f"Created user '{args.username}' with Airflow role {role}"))


def _change_password(args: argparse.Namespace) -> None:
    from det_airflow.api.user import NotFab

    client = connect(args.master)
    username = args.username or client.whoami()
    user_path = f"/{quote(username, safe='')}"
    try:
        client.fab_users("GET", user_path)  # FAB's, the user exists, and this login may see it
    except NotFab:
        _managed_by_airflow(args)
    password = _new_password(username)
    client.fab_users("PATCH", user_path, params={"update_mask": "password"}, json={"password": password})
    print(render.clean(f"Changed the password of user '{username}'"))


def _managed_by_airflow(args: argparse.Namespace) -> NoReturn:
    raise DetError(
        f"det user {args.verb}: users are Airflow's, not det's; with Airflow's simple auth manager, "
        f"{_MANAGED_BY_AIRFLOW[args.verb]}; with the FAB auth manager, {_FAB_WAY.get(args.verb, 'use det user ' + args.verb)}"
    )
