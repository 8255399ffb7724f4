"""Limits on what one request may carry, and database refusals answered as 4xx instead of 500.

Sizes are checked while the body streams in, so a client that sends more than it announced (or
announces nothing) is cut off at the limit rather than after the whole body is in memory.
"""

from __future__ import annotations

import logging
from http.cookies import CookieError, SimpleCookie
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, IntegrityError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from det_airflow.context_archive import LIMITS, format_size

log = logging.getLogger(__name__)

# An experiment YAML: real ones are a few KB, big hyperparameter grids tens of KB. Each trial gets
# the config and the master keeps it twice (as sent and normalized), so 1 MiB is generous headroom
# that still keeps one experiment from costing the database and every trial megabytes.
CONFIG_LIMIT_CHARS = 1024**2


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
    return BODY_LIMIT


def carries_credentials(headers: dict[bytes, bytes]) -> bool:
    """Whether a request sends a bearer token or Airflow's login cookie (valid or not)."""
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    if scheme.lower() == b"bearer" and token.strip():
        return True
    cookies = SimpleCookie()
    try:
        cookies.load(headers.get(b"cookie", b"").decode("latin-1"))
    except CookieError:
        return False
    morsel = cookies.get(_LOGIN_COOKIE)
    return morsel is not None and bool(morsel.value)


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


class BodyLimit:
    """ASGI middleware: refuses a body over ``body_limit`` by its Content-Length, or once it streams past."""

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

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(method, path, limit, received, announced=False, logged_in=logged_in)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge as exc:
            # Raised outside a route (which answers it itself); still a 413 if nothing was sent yet.
            if started:
                raise
            await _answer(scope, receive, send, exc.status_code, str(exc.detail))


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
    """Adds the body limit and the database-refusal handlers to the master's app."""
    app.add_middleware(BodyLimit)
    app.add_exception_handler(IntegrityError, _integrity_error)
    app.add_exception_handler(DataError, _data_error)
