"""Integers in paths and queries are bounded before a route runs: 422 naming the parameter.

A route's ``experiment_id: int`` takes any integer, and ``2**64`` reached the database, where
SQLite's driver raised OverflowError (a 500) and PostgreSQL refused the statement. Every route with
an integer path or query parameter is checked here, from its own signature, so that a route added
later is covered without a line of its own. Bodies are bounded by their wire models
(``det_airflow.api.models``); what still overflows deep in a query is answered 422 as well.
"""

from __future__ import annotations

import logging
import re
import types
import typing
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.dependencies.utils import get_flat_dependant
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, APIWebSocketRoute
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from det_airflow.config._limits import INT64_MAX, INT64_MIN

log = logging.getLogger(__name__)

_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
# Past this many digits int() refuses the text (Python's guard against slow conversions); such a
# number is out of range all the same.
_MAX_DIGITS = 4000
_CHECKED = "_det_bounded"


def _admits_int(annotation: Any) -> bool:
    """Whether a parameter of this type may be an integer: ``int``, ``int | None``,
    ``Annotated[int, ...]``, ``list[int]``, a ``Literal`` of integers."""
    if annotation is int:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _admits_int(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return any(isinstance(a, int) and not isinstance(a, bool) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset):
        return any(_admits_int(a) for a in typing.get_args(annotation))
    return False


def _out_of_range(text: str) -> bool:
    if not _INTEGER.fullmatch(text):
        return False  # not an integer: the route's own validation says so
    digits = text.strip().lstrip("+-")
    if len(digits) > _MAX_DIGITS:
        return True
    return not INT64_MIN <= int(text) <= INT64_MAX


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def problems(where: str, values: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """FastAPI's validation errors (``loc``, ``msg``) for the integers among ``values`` (name, text)
    that a 64-bit column cannot hold."""
    return [
        {
            "type": "int64_range",
            "loc": [where, name],
            "msg": f"must be an integer from {INT64_MIN} to {INT64_MAX}, got {_shown(text)}",
            "input": _shown(text),
        }
        for name, text in values
        if _out_of_range(text)
    ]


class _Bounded:
    """A route's ASGI app, behind a check of its integer path and query parameters."""

    def __init__(self, app: ASGIApp, path_names: list[str], query_names: list[str]) -> None:
        self.app = app
        self.path_names = path_names
        self.query_names = query_names
        setattr(self, _CHECKED, True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        params = scope.get("path_params") or {}
        found = problems("path", ((n, str(params[n])) for n in self.path_names if n in params))
        if self.query_names:
            query = QueryParams(scope.get("query_string", b""))
            found += problems("query", ((n, v) for n in self.query_names for v in query.getlist(n)))
        if not found:
            await self.app(scope, receive, send)
            return
        log.info("refused %s: %s", scope.get("path"), found[0]["msg"])
        answer = JSONResponse({"detail": found}, status_code=422)
        if scope["type"] == "websocket":
            socket = WebSocket(scope, receive, send)
            if "websocket.http.response" in scope.get("extensions", {}):
                await socket.send_denial_response(answer)
            else:
                await socket.close(code=1008, reason=f"{found[0]['loc'][1]}: {found[0]['msg']}"[:120])
            return
        await answer(scope, receive, send)


def bound_routes(routes: Iterable[Any]) -> int:
    """Puts the check in front of every route with an integer path or query parameter (once);
    how many routes it newly covers."""
    covered = 0
    for route in routes:
        if not isinstance(route, APIRoute | APIWebSocketRoute) or getattr(route.app, _CHECKED, False):
            continue
        flat = get_flat_dependant(route.dependant)
        path_names = [p.alias for p in flat.path_params if _admits_int(p.field_info.annotation)]
        query_names = [p.alias for p in flat.query_params if _admits_int(p.field_info.annotation)]
        if path_names or query_names:
            route.app = _Bounded(route.app, path_names, query_names)
            covered += 1
    return covered


class IntegerBounds:
    """ASGI middleware: before a request is routed, covers the app's routes not covered yet (those
    included after the app was built too, such as the web UI's pages)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._seen = -1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = scope.get("app")
        routes = getattr(getattr(host, "router", None), "routes", None)
        if routes is not None and len(routes) != self._seen:
            bound_routes(routes)
            self._seen = len(routes)
        await self.app(scope, receive, send)


async def _overflow(request: Request, exc: Exception) -> JSONResponse:
    # What got past the wire models (an integer computed from several, a value read back): the
    # driver's own words say which value; the request is refused, nothing was stored.
    log.info("refused %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(
        {"detail": f"invalid value: a number too large for the master's database ({exc})"},
        status_code=422,
    )


def install(app: FastAPI) -> None:
    """Bounds the integers of ``app``'s routes, and answers an overflow past them as 422."""
    bound_routes(app.routes)
    app.add_middleware(IntegerBounds)
    app.add_exception_handler(OverflowError, _overflow)
