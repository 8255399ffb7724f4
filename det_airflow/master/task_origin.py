"""Where a task's pages are served: an origin of their own, never the master's.

A notebook, TensorBoard or shell serves what its owner's code chose. Served on the master's origin,
its scripts would run with the visitor's Airflow login. So each task has a host name of its own,
from ``[det] task_proxy_host`` (``*.tasks.example.com``: task 7 at ``task-7.tasks.example.com``, with
the scheme and port of the master's address), on which the master's proxy serves nothing but that
task. A browser never carries its Airflow login there: the master's origin hands it a short grant
(:func:`grant`), which the task's origin takes once (:func:`take_grant`) and turns into a session of
its own (:func:`session`), a host-only cookie for that one task.

Grants, sessions and the list of a task's own cookies are signed (HMAC, PyJWT's HS256) with a key
only the master knows: random, made on first use and kept in the det settings table, so that every
API-server process shares it.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

from det_airflow.errors import DetError

# A grant carries the visitor from the master's origin to the task's: one redirect's worth of time.
GRANT_SECONDS = 60
# A session on a task's origin: a working day; every request still checks the visitor's rights.
SESSION_SECONDS = 8 * 3600
# The list of cookies a task's server set outlives sessions: the server sets them once.
OWN_COOKIES_SECONDS = 30 * 86400
# The task origin's own cookies (never forwarded to the task's server, never set by it).
SESSION_COOKIE = "det_task_session"
OWN_COOKIES_COOKIE = "det_task_cookies"
DET_COOKIE_PREFIX = "det_task"
# Under a task's prefix: where the task's origin takes a grant (the task's server never sees it).
LOGIN_PATH = "_det/login"
# Where the quickstart serves tasks when the master is on loopback: browsers and curl resolve every
# name under .localhost to loopback (RFC 6761), so it needs no DNS and no setting.
LOOPBACK_PATTERN = "*.localhost"
_LOOPBACK_NAMES = {"localhost"}
_KEY_SETTING = "task_origin_key"
_ALGORITHM = "HS256"
# One host name per task: no leading zero.
_TASK_LABEL = re.compile(r"task-([1-9][0-9]{0,17})")


class NoTaskOrigin(DetError):
    """Tasks have no origin of their own: the master is not on loopback and the setting is unset."""


@dataclass(frozen=True)
class TaskHosts:
    """The host names of tasks' origins: ``pattern`` with its ``*`` as ``task-<id>``."""

    pattern: str  # "*.tasks.example.com"
    scheme: str  # of the master's address
    port: int | None  # of the master's address; None: the scheme's own

    def host(self, task_id: int) -> str:
        return f"task-{task_id}{self.pattern[1:]}"

    def origin(self, task_id: int) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{self.host(task_id)}{port}"

    def task_of(self, host: str) -> int | None:
        """The task whose origin ``host`` (a Host header: name, and maybe a port) is; None for
        another host."""
        name = _host_name(host)
        label, dot, rest = name.partition(".")
        if not dot or "." + rest != self.pattern[1:]:
            return None
        match = _TASK_LABEL.fullmatch(label)
        return int(match.group(1)) if match else None


def looks_like_task_host(host: str) -> bool:
    """A cheap first look, before any setting is read: could ``host`` be a task's origin?"""
    return _TASK_LABEL.fullmatch(_host_name(host).partition(".")[0]) is not None


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 literal is never a task's host
        return host
    return host.rpartition(":")[0] if ":" in host else host


def public_url() -> str:
    """The master's address as browsers reach it: Airflow's ``[api] base_url``, else the address
    trials reach it at."""
    from airflow.sdk import conf

    from det_airflow.master import airflow_bridge

    return (conf.get("api", "base_url", fallback=None) or airflow_bridge.master_url()).rstrip("/")


def task_hosts() -> TaskHosts | None:
    """The tasks' host names: ``[det] task_proxy_host``; unset, ``*.localhost`` for a master on
    loopback; None when tasks have no origin of their own (their pages are then not served to
    browsers at all)."""
    from det_airflow import settings

    parts = urlsplit(public_url())
    scheme = parts.scheme or "http"
    pattern = settings.load().task_proxy_host
    if pattern is None and _is_loopback(parts.hostname or ""):
        pattern = LOOPBACK_PATTERN
    if pattern is None:
        return None
    return TaskHosts(pattern=pattern, scheme=scheme, port=parts.port)


def required_task_hosts() -> TaskHosts:
    hosts = task_hosts()
    if hosts is None:
        raise NoTaskOrigin(
            "task pages are served only from host names of their own, never from the master's: set "
            "[det] task_proxy_host in airflow.cfg (for example *.tasks.example.com, with a wildcard DNS "
            "record and a TLS certificate for it) and reload the API server (docs/tasks.md)"
        )
    return hosts


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- what is signed: grants, sessions, a task's own cookie names --------------------------------


class BadToken(DetError):
    """A grant or session that is not the master's, not for this task, or expired."""


_keys: dict[str, bytes] = {}
_keys_lock = threading.Lock()


def _key() -> bytes:
    """The master's signing key, made once and kept in its database (every API-server process
    reads the same one)."""
    from sqlalchemy.exc import IntegrityError

    from det_airflow.master.db import get_database, get_setting, set_setting

    db = get_database()
    with _keys_lock:
        if db.url in _keys:
            return _keys[db.url]
        with db.read() as conn:
            value = get_setting(conn, _KEY_SETTING)
        if value is None:
            try:
                with db.begin() as conn:
                    value = get_setting(conn, _KEY_SETTING)
                    if value is None:
                        value = secrets.token_hex(32)
                        set_setting(conn, _KEY_SETTING, value)
            except IntegrityError:  # another process made it first: theirs is the one
                with db.read() as conn:
                    value = get_setting(conn, _KEY_SETTING)
        assert value is not None
        _keys[db.url] = bytes.fromhex(value)
        return _keys[db.url]


def _sign(kind: str, task_id: int, seconds: int, claims: dict[str, Any]) -> str:
    now = int(time.time())
    payload = {**claims, "aud": f"det-task-{kind}", "task": task_id, "iat": now, "exp": now + seconds}
    return jwt.encode(payload, _key(), algorithm=_ALGORITHM)


def _verify(kind: str, task_id: int, token: str) -> dict[str, Any]:
    try:
        claims = jwt.decode(token, _key(), algorithms=[_ALGORITHM], audience=f"det-task-{kind}")
    except jwt.ExpiredSignatureError:
        raise BadToken(f"the {kind} has expired") from None
    except jwt.InvalidTokenError:
        raise BadToken(f"not a valid {kind}") from None
    if claims.get("task") != task_id:
        raise BadToken(f"the {kind} is for another task, not task {task_id}")
    return dict(claims)


def _user_claims(user: BaseUser) -> dict[str, Any]:
    """The user as the auth manager puts users in its own tokens (simple auth, FAB, any other)."""
    from det_airflow.airflow_compat import get_auth_manager

    return dict(get_auth_manager().serialize_user(user))


def _user_of(claims: dict[str, Any], kind: str) -> BaseUser:
    from det_airflow.airflow_compat import get_auth_manager

    user = claims.get("user")
    if not isinstance(user, dict):
        raise BadToken(f"not a valid {kind}")
    try:
        found = get_auth_manager().deserialize_user(user)
    except Exception:  # noqa: BLE001 - a user the auth manager no longer knows (FAB: deleted)
        found = None
    if found is None:
        raise BadToken(f"the {kind}'s user is unknown")
    return found


def grant(user: BaseUser, task_id: int) -> str:
    """What lets ``user``'s browser open task ``task_id`` on its origin, once, within GRANT_SECONDS."""
    return _sign(
        "grant", task_id, GRANT_SECONDS, {"user": _user_claims(user), "jti": secrets.token_urlsafe(18)}
    )


def take_grant(token: str, task_id: int) -> BaseUser:
    """The user a grant for task ``task_id`` names, the grant now used up; BadToken for any other
    token, or for a grant taken before (a copy from a URL: a history, a log, a Referer)."""
    from datetime import UTC, datetime

    from sqlalchemy import delete
    from sqlalchemy.exc import IntegrityError

    from det_airflow.master import schema
    from det_airflow.master.db import get_database

    claims = _verify("grant", task_id, token)
    user = _user_of(claims, "grant")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not 0 < len(jti) <= 64:
        raise BadToken("not a valid grant")
    table, now = schema.used_grants, datetime.now(UTC)
    try:
        with get_database().begin() as conn:
            conn.execute(delete(table).where(table.c.expires_at < now))
            conn.execute(
                table.insert().values(jti=jti, expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC))
            )
    except IntegrityError:
        raise BadToken("the grant has been used already") from None
    return user


def session(user: BaseUser, task_id: int) -> str:
    """The task origin's session cookie value for ``user``, for SESSION_SECONDS."""
    return _sign("session", task_id, SESSION_SECONDS, {"user": _user_claims(user)})


def user_of_session(token: str, task_id: int) -> BaseUser:
    return _user_of(_verify("session", task_id, token), "session")


def signed_names(names: list[str], task_id: int) -> str:
    """The cookie that lists the cookies task ``task_id``'s server set (signed: its pages' scripts
    may write cookies, but cannot add a name to this list)."""
    return _sign("cookies", task_id, OWN_COOKIES_SECONDS, {"names": sorted(set(names))})


def names_of(token: str | None, task_id: int) -> list[str]:
    """The names :func:`signed_names` listed; none for a missing, forged or expired list."""
    if not token:
        return []
    try:
        names = _verify("cookies", task_id, token).get("names")
    except BadToken:
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
