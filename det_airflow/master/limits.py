"""Limits on what one request may carry, and database refusals answered as 4xx instead of 500.

Integers in paths and queries are bounded by master/bounds.py, installed from here.

Sizes are checked while the body streams in, so a client that sends more than it announced (or
announces nothing) is cut off at the limit rather than after the whole body is in memory.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from http.cookies import CookieError, SimpleCookie
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, IntegrityError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from det_airflow.api.models import CONFIG_LIMIT_CHARS
from det_airflow.context_archive import LIMITS, format_size
from det_airflow.master import storage_limits

log = logging.getLogger(__name__)


def base64_length(raw_bytes: int) -> int:
    """Characters of the base64 text of ``raw_bytes`` bytes."""
    return 4 * -(-raw_bytes // 3)


# A create carries the context as base64 next to the config (JSON escaping may grow that sixfold).
CREATE_BODY_LIMIT = base64_length(LIMITS.archive_bytes) + 6 * CONFIG_LIMIT_CHARS + 64 * 1024
# Everything else: metric and log batches (10,000 entries at most) and small commands.
BODY_LIMIT = 16 * 1024**2
# A request with no credential at all is refused by every route that takes a body, so it gets only
# enough room for that refusal: the large limits would otherwise let anyone make the server read
# over a hundred MiB before the login check runs.
ANONYMOUS_BODY_LIMIT = 64 * 1024
_CREATE_ROUTES = ("/experiments", "/internal/experiments/register")
# Airflow's UI keeps its login in this cookie; API clients send a bearer token.
_LOGIN_COOKIE = "_token"


def body_limit(method: str, path: str, *, logged_in: bool = True) -> int:
    """The most bytes a request to ``path`` may send."""
    if not logged_in:
        return ANONYMOUS_BODY_LIMIT
    if method == "POST" and path.rstrip("/").endswith(_CREATE_ROUTES):
        return CREATE_BODY_LIMIT
    if storage_limits.is_upload(method, path):
        return storage_limits.FILE_LIMIT
    return BODY_LIMIT


def carries_credentials(headers: dict[bytes, bytes]) -> bool:
    """Whether a request sends a bearer token or Airflow's login cookie (valid or not)."""
    return _bearer_token(headers) is not None or _login_cookie(headers) is not None


class BodyTooLarge(HTTPException):
    """413, naming the limit and how much was sent (or that it was more)."""

    def __init__(
        self, method: str, path: str, limit: int, size: int, *, announced: bool, logged_in: bool = True
    ) -> None:
        amount = format_size(size) if announced else f"more than {format_size(limit)}"
        detail = f"request body: {amount} is over the limit of {format_size(limit)} for {method} {path}"
        if not logged_in:
            detail += " without a login (send a bearer token or Airflow's login cookie)"
        super().__init__(status_code=413, detail=detail)


# Bodies over the anonymous limit come only from a valid login or det token, and are bounded in
# flight: per sender (the service token, shared by det's tasks, is not one sender) and in bytes
# over all senders, so memory stays bounded however many requests arrive at once.
LARGE_BODIES_PER_SENDER = 2
LARGE_BODY_BYTES_IN_FLIGHT = 512 * 1024**2
_large_per_sender: Counter[str] = Counter()
_large_bytes_in_flight = 0
_SERVICE = "service"


async def sender_of(scope: Scope, headers: dict[bytes, bytes]) -> str | None:
    """Who sends this request, by a credential that is valid now: ``user:NAME``, ``trial:ID`` or
    ``service``; None when it sends none or an invalid one. Checked without reading the body."""
    token = _bearer_token(headers)
    if token is not None:
        det_sender = await run_in_threadpool(_det_token_sender, token)
        if det_sender is not None:
            return det_sender
    user = await _airflow_user(scope, token if token is not None else _login_cookie(headers))
    return None if user is None else f"user:{user}"


def _bearer_token(headers: dict[bytes, bytes]) -> str | None:
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _login_cookie(headers: dict[bytes, bytes]) -> str | None:
    cookies = SimpleCookie()
    try:
        cookies.load(headers.get(b"cookie", b"").decode("latin-1"))
    except CookieError:
        return None
    morsel = cookies.get(_LOGIN_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


def _det_token_sender(token: str) -> str | None:
    from det_airflow.master import auth

    digest = auth.hash_token(token)
    service = auth.service_token_hash()
    if service is not None and secrets.compare_digest(digest, service):
        return _SERVICE
    trial_id = auth.trial_of_token_hash(digest)
    return None if trial_id is None else f"trial:{trial_id}"


async def _airflow_user(scope: Scope, token: str | None) -> str | None:
    """The name of the Airflow user whose login ``token`` is, as the routes' ``get_user`` resolves it
    (or what the app overrides ``get_user`` with)."""
    from jwt import InvalidTokenError

    from det_airflow.airflow_compat import get_auth_manager, get_user

    app = scope.get("app")
    override = getattr(app, "dependency_overrides", {}).get(get_user)
    try:
        if override is not None:
            user = await override(Request(scope))
        elif token is None:
            return None
        else:
            user = await get_auth_manager().get_user_from_token(token)
    except (HTTPException, InvalidTokenError, ValueError, KeyError):
        return None
    return str(user.get_name())


class TooMuchInFlight(HTTPException):
    """429 (one sender) or 503 (the server as a whole): too many large bodies arriving at once."""


def _take_large(sender: str, size: int, method: str, path: str) -> None:
    global _large_bytes_in_flight
    if sender != _SERVICE and _large_per_sender[sender] >= LARGE_BODIES_PER_SENDER:
        raise TooMuchInFlight(
            429,
            f"request body: {sender.partition(':')[2] or sender} already sends {LARGE_BODIES_PER_SENDER} "
            f"bodies over {format_size(ANONYMOUS_BODY_LIMIT)} at once; wait for one to finish before "
            f"{method} {path}",
        )
    if _large_bytes_in_flight + size > LARGE_BODY_BYTES_IN_FLIGHT:
        raise TooMuchInFlight(
            503,
            f"request body: the master is receiving {format_size(_large_bytes_in_flight)} of large "
            f"bodies already (at most {format_size(LARGE_BODY_BYTES_IN_FLIGHT)}); try {method} {path} again",
        )
    _large_per_sender[sender] += 1
    _large_bytes_in_flight += size


def _give_back_large(sender: str, size: int) -> None:
    global _large_bytes_in_flight
    _large_per_sender[sender] -= 1
    if not _large_per_sender[sender]:
        del _large_per_sender[sender]
    _large_bytes_in_flight -= size


class BodyLimit:
    """ASGI middleware: refuses a body over ``body_limit`` by its Content-Length, or once it streams
    past; and before reading a body over the anonymous limit, checks that its credential is valid."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        headers = dict(scope.get("headers") or [])
        logged_in = carries_credentials(headers)
        limit = body_limit(method, path, logged_in=logged_in)
        announced = headers.get(b"content-length")
        if announced is not None:
            try:
                size = int(announced)
            except ValueError:
                await _answer(
                    scope, receive, send, 400, f"request body: Content-Length {announced!r} is not a number"
                )
                return
            if size > limit:
                exc = BodyTooLarge(method, path, limit, size, announced=True, logged_in=logged_in)
                await _answer(scope, receive, send, exc.status_code, str(exc.detail))
                return
        received = 0
        started = False
        sender: str | None = None
        # What a large body counts against the bytes in flight: its announced size, or the limit. A
        # file a trial stores goes to disk as it arrives: it holds at most a block in memory.
        large_size = limit if announced is None else int(announced)
        if storage_limits.is_upload(method, path):
            large_size = min(large_size, BODY_LIMIT)

        async def check_sender() -> None:
            nonlocal sender
            found = await sender_of(scope, headers)
            if found is None:
                raise NotLoggedIn(method, path)
            _take_large(found, large_size, method, path)
            sender = found

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(method, path, limit, received, announced=False, logged_in=logged_in)
                if received > ANONYMOUS_BODY_LIMIT and sender is None:
                    await check_sender()  # a body sent without a Content-Length, grown large
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            if announced is not None and large_size > ANONYMOUS_BODY_LIMIT:
                await check_sender()  # before a byte of the body is read
            await self.app(scope, limited_receive, watched_send)
        except (BodyTooLarge, NotLoggedIn, TooMuchInFlight) as exc:
            # Raised outside a route (which answers it itself); still answered if nothing was sent yet.
            if started:
                raise
            await _answer(scope, receive, send, exc.status_code, str(exc.detail))
        finally:
            if sender is not None:
                _give_back_large(sender, large_size)


class NotLoggedIn(HTTPException):
    """401: a body over the anonymous limit with no valid login or det token."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(
            status_code=401,
            detail=f"request body over {format_size(ANONYMOUS_BODY_LIMIT)} for {method} {path} needs a "
            "valid login (a bearer token or Airflow's login cookie) or det token; this one is not valid",
        )


async def _answer(scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
    await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)


def _database_message(exc: Exception) -> str:
    orig: Any = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


async def _integrity_error(request: Request, exc: Exception) -> JSONResponse:
    log.info("refused %s %s: %s", request.method, request.url.path, _database_message(exc))
    return JSONResponse({"detail": f"conflict with stored data: {_database_message(exc)}"}, status_code=409)


async def _data_error(request: Request, exc: Exception) -> JSONResponse:
    log.info("refused %s %s: %s", request.method, request.url.path, _database_message(exc))
    return JSONResponse({"detail": f"invalid value: {_database_message(exc)}"}, status_code=400)


def install(app: FastAPI) -> None:
    """Adds the body limit, the bounds of integer parameters (master/bounds.py) and the
    database-refusal handlers to the master's app."""
    from det_airflow.master import bounds

    bounds.install(app)
    app.add_middleware(BodyLimit)
    app.add_exception_handler(IntegrityError, _integrity_error)
    app.add_exception_handler(DataError, _data_error)
