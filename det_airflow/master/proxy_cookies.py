"""Which cookies pass the task proxy, each way.

Up, to a task's server: only cookies that server set itself through the proxy (an allow-list,
tracked in a signed cookie of the task's origin, ``det_task_cookies``), never one named like
Airflow's login (``_token*``), FAB's session (``session``, ``remember_token``) or the task origin's own
(``det_task*``), even if the server set one of those names. Everything else a browser holds for the
task's host (a cookie Airflow set for a parent domain, one a page's script wrote) stays behind.

Down, to the browser: a cookie the server sets is kept within the task's path prefix, for the task's
host alone (no ``Domain``), and dropped when it has one of those names or must span the site
(``__Host-``).
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

from det_airflow.master.task_origin import DET_COOKIE_PREFIX

# FAB's Flask session and Flask-Login's "remember me": either one logs its holder in to Airflow.
_FAB_COOKIES = frozenset({"session", "remember_token"})


def never_forwarded(name: str) -> bool:
    """Whether a cookie of this name is one of the platform's, whoever set it."""
    lowered = name.strip().lower()
    return (
        lowered.startswith(COOKIE_NAME_JWT_TOKEN)
        or lowered in _FAB_COOKIES
        or lowered.startswith(DET_COOKIE_PREFIX)
        or lowered.startswith("__host-")
    )


def pairs(headers: Iterable[str]) -> list[tuple[str, str]]:
    """The ``(name, name=value)`` pairs of a request's Cookie headers, in order."""
    found = []
    for header in headers:
        for part in header.split(";"):
            part = part.strip()
            name = part.split("=", 1)[0].strip()
            if part and name:
                found.append((name, part))
    return found


def cookie_header(headers: Iterable[str], allowed: Iterable[str]) -> str | None:
    """The Cookie header for the task's server: the request's cookies that are in ``allowed`` (the
    names the server set) and not the platform's; None when none is left."""
    names = {name for name in allowed if not never_forwarded(name)}
    kept = [part for name, part in pairs(headers) if name in names]
    return "; ".join(kept) or None


def confine_cookie(set_cookie: str, prefix: str) -> tuple[str, str] | None:
    """A ``Set-Cookie`` from a task's server as the proxy passes it on, with its name: its path kept
    within ``prefix``, its domain the task host's alone; None for a cookie of the platform's names or
    one that must span the site."""
    name_value, *attributes = set_cookie.split(";")
    name = name_value.split("=", 1)[0].strip()
    if not name or never_forwarded(name):
        return None
    path = prefix
    kept = [name_value.strip()]
    for attribute in attributes:
        key, _, value = attribute.strip().partition("=")
        if key.lower() == "path":
            if value.strip().startswith(prefix):
                path = value.strip()
        elif key.lower() != "domain" and attribute.strip():
            kept.append(attribute.strip())
    return name, "; ".join([*kept, f"Path={path}"])
