"""Who may call which route: people (Airflow login), det tasks (service token), one trial (trial token)."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy import Connection, select
from starlette.requests import HTTPConnection

from det_airflow.master import schema
from det_airflow.master.db import get_database, get_setting

SERVICE_TOKEN_SETTING = "service_token_sha256"
_CACHE_SECONDS = 30.0
_service_hash_cache: tuple[float, str | None] = (0.0, None)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token")
    return token.strip()


def _service_hash() -> str | None:
    global _service_hash_cache
    fetched_at, value = _service_hash_cache
    if value is None or time.monotonic() - fetched_at > _CACHE_SECONDS:
        with get_database().read() as conn:
            value = get_setting(conn, SERVICE_TOKEN_SETTING)
        _service_hash_cache = (time.monotonic(), value)
    return value


def service_token_hash() -> str | None:
    """The stored hash of the service token (cached briefly), None before `det admin migrate`."""
    return _service_hash()


def _trial_holding(conn: Connection, token_hash: str) -> int | None:
    """The trial whose current run holds the token: its own (the chief's), or one of a multi-node
    run's other nodes while it runs."""
    trial_id = conn.execute(
        select(schema.trials.c.id).where(schema.trials.c.token_hash == token_hash)
    ).scalar()
    if trial_id is None:
        # A node's token holds only while its run is the trial's current one and goes on.
        nodes, trials = schema.trial_nodes, schema.trials
        trial_id = conn.execute(
            select(nodes.c.trial_id)
            .join(trials, trials.c.id == nodes.c.trial_id)
            .where(
                nodes.c.token_hash == token_hash,
                nodes.c.state == "running",
                nodes.c.run_id == trials.c.run_id,
                trials.c.token_hash.is_not(None),
            )
        ).scalar()
    return None if trial_id is None else int(trial_id)


def trial_of_token_hash(token_hash: str) -> int | None:
    """The trial whose current run holds the token with ``token_hash``, if any."""
    with get_database().read() as conn:
        return _trial_holding(conn, token_hash)


def require_service(request: Request) -> None:
    """Routes for det tasks: the service token from the `det_default` connection."""
    expected = _service_hash()
    if expected is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "no service token: run `det admin migrate`")
    if not secrets.compare_digest(hash_token(_bearer(request)), expected):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid service token")


def require_trial(trial_id: int, request: Request) -> int:
    """Routes for one trial's training code: a token issued for this trial's current run."""
    token_hash = hash_token(_bearer(request))
    with get_database().read() as conn:
        holder = _trial_holding(conn, token_hash)
    if holder != trial_id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token not valid for trial {trial_id}")
    return trial_id


def require_any_trial(request: Request) -> int:
    """A trial token for some trial (checkpoint reads): returns that trial's id."""
    with get_database().read() as conn:
        trial_id = _trial_holding(conn, hash_token(_bearer(request)))
    if trial_id is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid trial token")
    return trial_id


TrialAuth = Annotated[int, Depends(require_trial)]
AnyTrialAuth = Annotated[int, Depends(require_any_trial)]
ServiceAuth = Depends(require_service)


# What an HTML form can send without a CORS preflight; JSON clients never send these.
_FORM_CONTENT_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def own_origins(connection: HTTPConnection) -> set[str]:
    """The origins of the master's pages: the one the request reached (a WebSocket's as its page's
    http(s) origin) and Airflow's configured base URL."""
    from airflow.sdk import conf

    scheme = {"ws": "http", "wss": "https"}.get(connection.url.scheme, connection.url.scheme)
    origins = {f"{scheme}://{connection.url.netloc}"}
    if base_url := conf.get("api", "base_url", fallback=None):
        parsed = urlsplit(base_url)
        origins.add(f"{parsed.scheme}://{parsed.netloc}")
    return origins


def cross_site(connection: HTTPConnection, what: str) -> str | None:
    """Why a request that a page of another site made with the user's login cookie is refused; None
    when it comes from the master's own pages or from a client that is no browser (bearer-token
    clients, the CLI, send neither Sec-Fetch-Site nor Origin)."""
    fetch_site = connection.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"{what}: refused a {fetch_site} request"
    origin = connection.headers.get("origin")
    if origin is not None and origin.rstrip("/") not in own_origins(connection):
        return f"{what}: refused a request from origin '{origin}'"
    return None


def refuse_cross_site(request: Request) -> None:
    """Refuse a change that a page of another site could make with the user's login cookie.

    Form content types are refused too: JSON clients never send them, and an HTML form sends them
    without a CORS preflight.
    """
    if request.method in SAFE_METHODS:
        return
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in _FORM_CONTENT_TYPES:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"{request.method} {request.url.path}: content type '{content_type}' is refused; send JSON",
        )
    refusal = cross_site(request, f"{request.method} {request.url.path}")
    if refusal is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, refusal)


CrossSiteGuard = Depends(refuse_cross_site)
