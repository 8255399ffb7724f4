"""The master's reverse proxy to tasks' servers: ``/det/proxy/<task_id>/...``, HTTP and WebSocket.

A notebook, TensorBoard or shell listens where only the master reaches it, and admits a request only
with the secret its program chose (``X-Det-Task-Secret``; a notebook's token as well). The proxy lets
through the people ``tasks.check_open`` allows, adds that secret, and forwards the whole path: each
server runs under the prefix ``/det/proxy/<id>/``, so its pages link to themselves through here.

The task's server runs its owner's code, which nobody else trusts: the caller's Airflow login (the
bearer token, the ``_token`` cookie) never goes upstream, and a cookie the server sets is confined to
the task's prefix, where it cannot shadow Airflow's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Annotated
from urllib.parse import quote

import httpx
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, WebSocket, status
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.types import Scope
from starlette.websockets import WebSocketDisconnect, WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.frames import EXTERNAL_CLOSE_CODES
from websockets.typing import Subprotocol

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.master import auth, tasks
from det_airflow.master.authz import Caller, CallerDep
from det_airflow.master.db import get_database
from det_airflow.tasks import SECRET_HEADER

# Headers that belong to one connection, not to the request or answer it carries (RFC 9110 7.6.1).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Never sent upstream: the caller's login, the proxy's own secret if a client sends one, the master's
# host name (the server's is its own), cookies (sent again without Airflow's login), and Expect
# (the server here answers 100-continue itself).
_NOT_FORWARDED = _HOP_BY_HOP | {"authorization", SECRET_HEADER.lower(), "host", "cookie", "expect"}
# The master's server writes its own.
_NOT_RETURNED = _HOP_BY_HOP | {"date", "server"}
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

# A request's connection may wait for a free slot this long; a server may take this long to start
# answering (a notebook exports, a TensorBoard loads a large run) or to take a body.
_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=300.0, pool=30.0)
# Each request through the proxy holds one connection from the browser already: no cap of its own,
# so that one user's slow downloads never make another wait.
_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30.0)
# A kernel's message carries its cell's output (plots included): large, but bounded.
WEBSOCKET_MAX_MESSAGE = 64 * 1024**2
_OPEN_SECONDS = 10.0

_client: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None


def _http_client() -> httpx.AsyncClient:
    """The process's one client to tasks' servers (its pool keeps their connections open), made on
    first use in the serving event loop; ``trust_env=False``: tasks are never reached through the
    environment's HTTP proxy."""
    global _client
    loop = asyncio.get_running_loop()
    if _client is None or _client[0] is not loop or _client[1].is_closed:
        _client = (
            loop,
            httpx.AsyncClient(timeout=_TIMEOUT, limits=_LIMITS, trust_env=False, follow_redirects=False),
        )
    return _client[1]


@contextlib.asynccontextmanager
async def _lifespan(_app: FastAPI) -> AsyncIterator[None]:
    global _client
    try:
        yield
    finally:
        if _client is not None:
            await _client[1].aclose()
            _client = None


router = APIRouter(lifespan=_lifespan)


# --- who may come through -------------------------------------------------------------------------


def refuse_cross_site(request: Request) -> None:
    """Refuse a change to a task's server that a page of another site makes with the user's login.

    Unlike the API routes' guard (auth.refuse_cross_site), form content types pass: TensorBoard's
    own pages post forms.
    """
    if request.method in auth.SAFE_METHODS:
        return
    refusal = auth.cross_site(request, f"{request.method} {request.url.path}")
    if refusal is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, refusal)


def _login_token(connection: HTTPConnection) -> str | None:
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return connection.cookies.get(COOKIE_NAME_JWT_TOKEN) or None


async def websocket_user(websocket: WebSocket) -> BaseUser:
    """Who opens a WebSocket, from Airflow's login as Airflow's own ``get_user`` reads it (a bearer
    token first, else the login cookie); ``get_user`` itself takes only HTTP requests."""
    from jwt import ExpiredSignatureError, InvalidTokenError

    from det_airflow.airflow_compat import get_auth_manager

    token = _login_token(websocket)
    if token is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Not authenticated")
    try:
        return await get_auth_manager().get_user_from_token(token)
    except ExpiredSignatureError:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Token Expired") from None
    except InvalidTokenError:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Invalid JWT token") from None


def _target(caller: Caller, task_id: int) -> tasks.ProxyTarget:
    with get_database().read() as conn:
        return tasks.proxy_target(conn, caller, task_id)


# --- what goes up and what comes back -------------------------------------------------------------


def _upstream_path(scope: Scope, task_id: int, path: str) -> str:
    """The path the task's server serves: its prefix and the rest of the path as the client sent it
    (still percent-encoded: a notebook's file names may hold an encoded ``/``)."""
    raw = scope.get("raw_path")
    if raw:
        _, marker, rest = raw.decode("latin-1").split("?", 1)[0].partition("/proxy/")
        _, slash, tail = rest.partition("/")
        if marker and slash:
            return tasks.PROXY_PREFIX.format(id=task_id) + tail
    return tasks.PROXY_PREFIX.format(id=task_id) + quote(path)


def _cookies_without_login(headers: Iterable[str]) -> str | None:
    """The request's cookies less Airflow's login (``_token`` and any cookie named like it)."""
    kept = [
        part.strip()
        for header in headers
        for part in header.split(";")
        if part.strip() and not part.split("=", 1)[0].strip().startswith(COOKIE_NAME_JWT_TOKEN)
    ]
    return "; ".join(kept) or None


def _named_in_connection(headers: Mapping[str, str]) -> set[str]:
    return {name.strip().lower() for name in headers.get("connection", "").split(",") if name.strip()}


def _secret_headers(target: tasks.ProxyTarget) -> list[tuple[str, str]]:
    headers = [(SECRET_HEADER, target.secret)]
    if target.type == "notebook":
        headers.append(("Authorization", f"token {target.secret}"))
    return headers


def _upstream_headers(request: Request, target: tasks.ProxyTarget) -> list[tuple[str, str]]:
    dropped = _NOT_FORWARDED | _named_in_connection(request.headers)
    headers = [(name, value) for name, value in request.headers.items() if name not in dropped]
    if "accept-encoding" not in request.headers:
        # The answer comes back as the server encoded it: only what the client can read.
        headers.append(("Accept-Encoding", "identity"))
    if (cookies := _cookies_without_login(request.headers.getlist("cookie"))) is not None:
        headers.append(("Cookie", cookies))
    return headers + _secret_headers(target)


def confine_cookie(set_cookie: str, prefix: str) -> str | None:
    """A ``Set-Cookie`` from a task's server, its path kept within ``prefix`` and its domain the
    master's own; None for one Airflow's login could be shadowed by, or one that must span the site."""
    name_value, *attributes = set_cookie.split(";")
    name = name_value.split("=", 1)[0].strip()
    if not name or name.startswith(COOKIE_NAME_JWT_TOKEN) or name.startswith("__Host-"):
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
    return "; ".join([*kept, f"Path={path}"])


def _returned_headers(upstream: httpx.Response, target: tasks.ProxyTarget) -> list[tuple[bytes, bytes]]:
    prefix = tasks.PROXY_PREFIX.format(id=target.task_id)
    dropped = _NOT_RETURNED | _named_in_connection(upstream.headers)
    headers: list[tuple[bytes, bytes]] = []
    for raw_name, raw_value in upstream.headers.raw:
        name = raw_name.decode("latin-1").lower()
        if name in dropped:
            continue
        if name == "set-cookie":
            cookie = confine_cookie(raw_value.decode("latin-1"), prefix)
            if cookie is None:
                continue
            raw_value = cookie.encode("latin-1")
        elif name == "location" and raw_value.startswith(target.base_url.encode() + b"/"):
            # A server that names its own address sends the browser back through the proxy.
            raw_value = raw_value[len(target.base_url) :]
        headers.append((name.encode("latin-1"), raw_value))
    return headers


async def _body(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """The server's answer as it arrives (still encoded as it sent it); its connection goes back to
    the pool, or is closed, however the client's download ends."""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await upstream.aclose()


def _unreachable(target: tasks.ProxyTarget, exc: Exception) -> HTTPException:
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return HTTPException(
            status.HTTP_504_GATEWAY_TIMEOUT, f"{target.type} {target.task_id} did not answer in time"
        )
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HTTPException(
        status.HTTP_502_BAD_GATEWAY, f"{target.type} {target.task_id} does not answer: {why}"
    )


# --- routes ---------------------------------------------------------------------------------------


@router.api_route(
    "/proxy/{task_id}",
    methods=["GET", "HEAD"],
    include_in_schema=False,
    dependencies=[Depends(requires_authenticated())],
)
def to_prefix(task_id: int, request: Request) -> RedirectResponse:
    """The task's page is under its prefix, with the slash its relative links need."""
    query = request.url.query
    return RedirectResponse(tasks.PROXY_PREFIX.format(id=task_id) + (f"?{query}" if query else ""))


@router.api_route(
    "/proxy/{task_id}/{path:path}",
    methods=_METHODS,
    include_in_schema=False,
    dependencies=[Depends(requires_authenticated()), Depends(refuse_cross_site)],
)
async def proxy_http(task_id: int, path: str, request: Request, caller: CallerDep) -> Response:
    """Forward the request to the task's server, the body streamed up and the answer streamed back."""
    target = await run_in_threadpool(_target, caller, task_id)
    client = _http_client()
    url = target.base_url + _upstream_path(request.scope, task_id, path)
    if query := request.scope.get("query_string", b""):
        url += "?" + query.decode("latin-1")
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    upstream_request = client.build_request(
        request.method,
        url,
        headers=_upstream_headers(request, target),
        content=request.stream() if has_body else None,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except httpx.TransportError as exc:
        raise _unreachable(target, exc) from None
    response = StreamingResponse(_body(upstream), status_code=upstream.status_code)
    response.raw_headers = _returned_headers(upstream, target)
    return response


@router.websocket("/proxy/{task_id}/{path:path}")
async def proxy_websocket(
    websocket: WebSocket,
    task_id: int,
    path: str,
    user: Annotated[BaseUser, Depends(websocket_user)],
) -> None:
    """Relay a WebSocket (a kernel's channels, a terminal) between the client and the task's server.

    Refusals come before the handshake completes, as the HTTP answer the routes would give."""
    refusal = auth.cross_site(websocket, f"WebSocket {websocket.url.path}")
    if refusal is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, refusal)
    target = await run_in_threadpool(_target, Caller(user), task_id)
    url = "ws" + target.base_url.removeprefix("http") + _upstream_path(websocket.scope, task_id, path)
    if query := websocket.scope.get("query_string", b""):
        url += "?" + query.decode("latin-1")
    headers = _secret_headers(target)
    if (cookies := _cookies_without_login(websocket.headers.getlist("cookie"))) is not None:
        headers.append(("Cookie", cookies))
    subprotocols = [Subprotocol(p) for p in websocket.scope.get("subprotocols") or []]
    try:
        upstream = await connect(
            url,
            additional_headers=headers,
            subprotocols=subprotocols or None,
            max_size=WEBSOCKET_MAX_MESSAGE,
            compression=None,  # a loopback or cluster link: compressing costs more than it saves
            proxy=None,
            open_timeout=_OPEN_SECONDS,
        )
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        raise _unreachable(target, exc) from None
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _relay(websocket, upstream)


def _sendable(code: int | None, otherwise: int) -> int:
    """A close code that may go in a close frame (1005 and 1006 only describe a closing)."""
    if code is not None and (code in EXTERNAL_CLOSE_CODES or 3000 <= code < 5000):
        return code
    return otherwise


async def _relay(client: WebSocket, upstream: ClientConnection) -> None:
    """Pass text and binary messages both ways until one side closes, then close the other with the
    same code and reason."""

    async def client_to_upstream() -> tuple[int, str]:
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                return int(message.get("code") or 1000), str(message.get("reason") or "")
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")

    async def upstream_to_client() -> None:
        async for message in upstream:
            if isinstance(message, str):
                await client.send_text(message)
            else:
                await client.send_bytes(message)

    up = asyncio.ensure_future(client_to_upstream())
    down = asyncio.ensure_future(upstream_to_client())
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (up, down):
            task.cancel()
        left, failed = await asyncio.gather(up, down, return_exceptions=True)
    if isinstance(left, tuple) or isinstance(failed, WebSocketDisconnect | OSError | RuntimeError):
        code, reason = left if isinstance(left, tuple) else (1001, "")
        await upstream.close(_sendable(code, 1001), reason)
    elif client.application_state == WebSocketState.CONNECTED:
        code = _sendable(upstream.close_code, 1014)  # 1014: the server behind a proxy failed
        with contextlib.suppress(RuntimeError, OSError, ConnectionClosed):
            await client.close(code, upstream.close_reason or "")
