"""The master's reverse proxy to tasks' servers: ``/det/proxy/<task_id>/...``, HTTP and WebSocket.

A notebook, TensorBoard or shell listens where only the master reaches it, and admits a request only
with the secret its program chose (``X-Det-Task-Secret``; a notebook's token as well). The proxy lets
through the people ``tasks.check_open`` allows, adds that secret, and forwards the whole path: each
server runs under the prefix ``/det/proxy/<id>/``, so its pages link to themselves through here.

The task's server runs its owner's code, which nobody else trusts, so its pages never run on the
master's origin (docs/tasks.md):

- On the master's origin, a client with a bearer token (the CLI: ``det shell``'s WebSocket, scripts)
  is proxied with no cookie at all, and every answer carries ``Content-Security-Policy: sandbox``,
  so that nothing it serves runs scripts there even if a browser opens it. A browser (Airflow's
  login cookie) is sent on, after the same access check, to the task's own origin
  (master/task_origin.py) with a short grant; a WebSocket with only the login cookie is refused.
- On the task's origin (``task-<id>.<[det] task_proxy_host>``), only that task is served, to a
  visitor with the origin's own session, checked again on every request; changes and WebSockets
  must come from that origin's own pages. The caller's Airflow login is never accepted there, and
  only the cookies the task's server set go up (master/proxy_cookies.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from collections.abc import AsyncIterator, Mapping
from typing import Annotated
from urllib.parse import quote, urlencode, urlsplit

import httpx
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, WebSocket, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.frames import EXTERNAL_CLOSE_CODES
from websockets.typing import Subprotocol

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.errors import DetError
from det_airflow.master import auth, proxy_cookies, task_origin, tasks
from det_airflow.master.authz import Caller, CallerDep, PermissionDenied
from det_airflow.master.db import get_database
from det_airflow.master.lifecycle import NotFound, StateError
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
# host name (the server's is its own), cookies (only the task's own are sent again), and Expect
# (the server here answers 100-continue itself).
_NOT_FORWARDED = _HOP_BY_HOP | {"authorization", SECRET_HEADER.lower(), "host", "cookie", "expect"}
# The master's server writes its own.
_NOT_RETURNED = _HOP_BY_HOP | {"date", "server"}
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# What the master's origin adds to every answer of a task's server: a page that a browser opens
# there anyway runs in a unique origin, without scripts, forms or the master's cookies.
SANDBOX = "sandbox"

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


# The master's origin: bearer clients, and browsers sent on to the task's origin.
router = APIRouter(lifespan=_lifespan)
# The task's origin: that task's pages, for visitors with the origin's session.
task_router = APIRouter()


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


def _bearer(connection: HTTPConnection) -> str | None:
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


async def websocket_user(websocket: WebSocket) -> BaseUser:
    """Who opens a WebSocket on the master's origin: Airflow's login as a bearer token, read as
    Airflow's own ``get_user`` reads it (which takes only HTTP requests). The login cookie alone
    is a browser's, whose WebSockets go to the task's own origin."""
    from jwt import ExpiredSignatureError, InvalidTokenError

    from det_airflow.airflow_compat import get_auth_manager

    token = _bearer(websocket)
    if token is None:
        if websocket.cookies.get(COOKIE_NAME_JWT_TOKEN):
            raise HTTPException(status.HTTP_403_FORBIDDEN, _BROWSER_WEBSOCKET)
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Not authenticated")
    try:
        return await get_auth_manager().get_user_from_token(token)
    except ExpiredSignatureError:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Token Expired") from None
    except InvalidTokenError:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Invalid JWT token") from None


_BROWSER_WEBSOCKET = (
    "a task's WebSocket opens on the task's own origin (its page's), or on the master's with a bearer "
    "token; not with the master's login cookie"
)


def _target(caller: Caller, task_id: int) -> tasks.ProxyTarget:
    with get_database().read() as conn:
        return tasks.proxy_target(conn, caller, task_id)


def _refuse_other_origins(connection: HTTPConnection, task_id: int, what: str) -> None:
    """On a task's origin: refuse what a page of any other origin sends, the master's included."""
    fetch_site = connection.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"{what}: refused a {fetch_site} request")
    origin = connection.headers.get("origin")
    if origin is None:
        return
    hosts = task_origin.task_hosts()
    # The origin as configured, or as this request reached it (a front proxy may drop the port).
    own = {connection.headers.get("host", "").lower()}
    if hosts is not None:
        own.add(urlsplit(hosts.origin(task_id)).netloc)
    if urlsplit(origin).netloc.lower() not in own:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"{what}: refused a request from origin '{origin}'")


def _session_user(connection: HTTPConnection, task_id: int) -> BaseUser | None:
    """The visitor the task origin's session cookie names; None without a valid one."""
    value = connection.cookies.get(task_origin.SESSION_COOKIE)
    if not value:
        return None
    try:
        return task_origin.user_of_session(value, task_id)
    except task_origin.BadToken:
        return None


# --- paths ----------------------------------------------------------------------------------------


def _browser_prefix(scope: Scope, task_id: int) -> str:
    """The task's prefix as the browser sees it (under the app's mount: ``/det/proxy/<id>/``)."""
    return f"{scope.get('root_path', '')}/proxy/{task_id}/"


def _raw_target(scope: Scope) -> str:
    """The path and query the client asked for, still percent-encoded."""
    raw = scope.get("raw_path") or quote(scope["path"]).encode()
    query = scope.get("query_string", b"")
    return raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")


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


# --- what goes up and what comes back -------------------------------------------------------------


def _named_in_connection(headers: Mapping[str, str]) -> set[str]:
    return {name.strip().lower() for name in headers.get("connection", "").split(",") if name.strip()}


def _secret_headers(target: tasks.ProxyTarget) -> list[tuple[str, str]]:
    headers = [(SECRET_HEADER, target.secret)]
    if target.type == "notebook":
        headers.append(("Authorization", f"token {target.secret}"))
    return headers


def _upstream_headers(
    request: Request, target: tasks.ProxyTarget, cookies: str | None
) -> list[tuple[str, str]]:
    dropped = _NOT_FORWARDED | _named_in_connection(request.headers)
    headers = [(name, value) for name, value in request.headers.items() if name not in dropped]
    if "accept-encoding" not in request.headers:
        # The answer comes back as the server encoded it: only what the client can read.
        headers.append(("Accept-Encoding", "identity"))
    if cookies is not None:
        headers.append(("Cookie", cookies))
    return headers + _secret_headers(target)


def _returned_headers(
    upstream: httpx.Response, target: tasks.ProxyTarget, prefix: str | None
) -> tuple[list[tuple[bytes, bytes]], list[str]]:
    """The server's headers as the client gets them, and the names of the cookies it set.

    ``prefix``: the task's prefix on its own origin, where its cookies are kept; None on the
    master's origin, where no cookie of the task's is set and the answer is sandboxed."""
    dropped = _NOT_RETURNED | _named_in_connection(upstream.headers)
    headers: list[tuple[bytes, bytes]] = []
    names: list[str] = []
    for raw_name, raw_value in upstream.headers.raw:
        name = raw_name.decode("latin-1").lower()
        if name in dropped:
            continue
        if name == "set-cookie":
            confined = (
                None if prefix is None else proxy_cookies.confine_cookie(raw_value.decode("latin-1"), prefix)
            )
            if confined is None:
                continue
            names.append(confined[0])
            raw_value = confined[1].encode("latin-1")
        elif name == "location" and raw_value.startswith(target.base_url.encode() + b"/"):
            # A server that names its own address sends the browser back through the proxy.
            raw_value = raw_value[len(target.base_url) :]
        headers.append((name.encode("latin-1"), raw_value))
    if prefix is None:
        headers.append((b"content-security-policy", SANDBOX.encode()))
    return headers, names


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


async def _forward(
    request: Request,
    task_id: int,
    path: str,
    target: tasks.ProxyTarget,
    cookies: str | None,
    prefix: str | None,
) -> tuple[StreamingResponse, list[str]]:
    """Send the request to the task's server, the body streamed up and the answer streamed back;
    answers the response and the names of the cookies the server set."""
    client = _http_client()
    url = target.base_url + _upstream_path(request.scope, task_id, path)
    if query := request.scope.get("query_string", b""):
        url += "?" + query.decode("latin-1")
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    upstream_request = client.build_request(
        request.method,
        url,
        headers=_upstream_headers(request, target, cookies),
        content=request.stream() if has_body else None,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except httpx.TransportError as exc:
        raise _unreachable(target, exc) from None
    response = StreamingResponse(_body(upstream), status_code=upstream.status_code)
    response.raw_headers, names = _returned_headers(upstream, target, prefix)
    return response, names


async def _connect_upstream(
    websocket: WebSocket, task_id: int, path: str, target: tasks.ProxyTarget, cookies: str | None
) -> ClientConnection:
    url = "ws" + target.base_url.removeprefix("http") + _upstream_path(websocket.scope, task_id, path)
    if query := websocket.scope.get("query_string", b""):
        url += "?" + query.decode("latin-1")
    headers = _secret_headers(target)
    if cookies is not None:
        headers.append(("Cookie", cookies))
    subprotocols = [Subprotocol(p) for p in websocket.scope.get("subprotocols") or []]
    try:
        return await connect(
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


# --- the master's origin --------------------------------------------------------------------------


@router.api_route(
    "/proxy/{task_id}",
    methods=["GET", "HEAD"],
    include_in_schema=False,
    dependencies=[Depends(requires_authenticated())],
)
def to_prefix(task_id: int, request: Request) -> RedirectResponse:
    """The task's page is under its prefix, with the slash its relative links need."""
    query = request.url.query
    return RedirectResponse(_browser_prefix(request.scope, task_id) + (f"?{query}" if query else ""))


@router.api_route(
    "/proxy/{task_id}/{path:path}",
    methods=_METHODS,
    include_in_schema=False,
    dependencies=[Depends(requires_authenticated()), Depends(refuse_cross_site)],
)
async def proxy_http(task_id: int, path: str, request: Request, caller: CallerDep) -> Response:
    """A bearer client's request goes to the task's server (no cookie up, the answer sandboxed); a
    browser is sent on to the task's own origin with a grant."""
    target = await run_in_threadpool(_target, caller, task_id)
    if _bearer(request) is None:
        return await run_in_threadpool(_to_task_origin, request, caller, task_id)
    response, _ = await _forward(request, task_id, path, target, None, None)
    return response


def _to_task_origin(request: Request, caller: Caller, task_id: int) -> Response:
    """303 to the task origin's login, which takes the grant and then shows the page asked for."""
    try:
        hosts = task_origin.required_task_hosts()
    except task_origin.NoTaskOrigin as exc:
        return _error_page(
            status.HTTP_503_SERVICE_UNAVAILABLE, f"Task {task_id} cannot be opened here", str(exc)
        )
    query = urlencode({"grant": task_origin.grant(caller.user, task_id), "next": _raw_target(request.scope)})
    location = (
        hosts.origin(task_id) + _browser_prefix(request.scope, task_id) + task_origin.LOGIN_PATH + "?" + query
    )
    # The grant is in the address: no page may pass it on as a referrer, no cache may keep it.
    return RedirectResponse(
        location,
        status.HTTP_303_SEE_OTHER,
        headers={"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"},
    )


def _error_page(status_code: int, title: str, message: str) -> HTMLResponse:
    body = (
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(message)}</p>"
    )
    return HTMLResponse(body, status_code=status_code, headers={"Content-Security-Policy": SANDBOX})


@router.websocket("/proxy/{task_id}/{path:path}")
async def proxy_websocket(
    websocket: WebSocket,
    task_id: int,
    path: str,
    user: Annotated[BaseUser, Depends(websocket_user)],
) -> None:
    """Relay a bearer client's WebSocket (``det shell``'s terminal) to the task's server, no cookie up.

    Refusals come before the handshake completes, as the HTTP answer the routes would give."""
    if _bearer(websocket) is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, _BROWSER_WEBSOCKET)
    refusal = auth.cross_site(websocket, f"WebSocket {websocket.url.path}")
    if refusal is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, refusal)
    target = await run_in_threadpool(_target, Caller(user), task_id)
    upstream = await _connect_upstream(websocket, task_id, path, target, None)
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _relay(websocket, upstream)


# --- the task's origin ----------------------------------------------------------------------------


def _safe_next(scope: Scope, task_id: int, next_path: str) -> str:
    """Where the login sends the browser: a path under the task's prefix, else the prefix."""
    prefix = _browser_prefix(scope, task_id)
    if next_path.startswith(prefix) and not re.search(r"[\x00-\x1f\x7f\\]", next_path):
        return next_path
    return prefix


@task_router.get("/proxy/{task_id}/" + task_origin.LOGIN_PATH, include_in_schema=False)
async def task_login(
    task_id: int,
    request: Request,
    grant: Annotated[str, Query(max_length=4096)],
    next: str = "",  # noqa: A002 - the address's own word
) -> Response:
    """Take a grant from the master's origin: a session of this origin for its user, then the page."""
    try:
        user = await run_in_threadpool(task_origin.take_grant, grant, task_id)
    except task_origin.BadToken as exc:
        return _error_page(
            status.HTTP_403_FORBIDDEN,
            f"Task {task_id} cannot be opened",
            f"{exc}: open the task again from Airflow",
        )
    await run_in_threadpool(_target, Caller(user), task_id)
    response = RedirectResponse(
        _safe_next(request.scope, task_id, next[:8192]),
        status.HTTP_303_SEE_OTHER,
        headers={"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"},
    )
    response.set_cookie(
        task_origin.SESSION_COOKIE,
        await run_in_threadpool(task_origin.session, user, task_id),
        max_age=task_origin.SESSION_SECONDS,
        path=_browser_prefix(request.scope, task_id),
        secure=_is_https(request),
        httponly=True,
        samesite="lax",
    )
    return response


def _is_https(connection: HTTPConnection) -> bool:
    hosts = task_origin.task_hosts()
    return connection.url.scheme in ("https", "wss") or (hosts is not None and hosts.scheme == "https")


@task_router.api_route("/proxy/{task_id}", methods=["GET", "HEAD"], include_in_schema=False)
def task_to_prefix(task_id: int, request: Request) -> RedirectResponse:
    query = request.url.query
    return RedirectResponse(_browser_prefix(request.scope, task_id) + (f"?{query}" if query else ""))


@task_router.api_route("/proxy/{task_id}/{path:path}", methods=_METHODS, include_in_schema=False)
async def task_http(task_id: int, path: str, request: Request) -> Response:
    """The task's page for a visitor with this origin's session; the task's own cookies go up."""
    user = await run_in_threadpool(_session_user, request, task_id)
    if user is None:
        return _login_again(request, task_id)
    if request.method not in auth.SAFE_METHODS:
        _refuse_other_origins(request, task_id, f"{request.method} {request.url.path}")
    target = await run_in_threadpool(_target, Caller(user), task_id)
    own = await run_in_threadpool(
        task_origin.names_of, request.cookies.get(task_origin.OWN_COOKIES_COOKIE), task_id
    )
    cookies = proxy_cookies.cookie_header(request.headers.getlist("cookie"), own)
    prefix = _browser_prefix(request.scope, task_id)
    response, names = await _forward(request, task_id, path, target, cookies, prefix)
    if set(names) - set(own):
        signed = await run_in_threadpool(task_origin.signed_names, [*own, *names], task_id)
        response.raw_headers.append(
            (
                b"set-cookie",
                _cookie_line(task_origin.OWN_COOKIES_COOKIE, signed, prefix, _is_https(request)).encode(
                    "latin-1"
                ),
            )
        )
    return response


def _cookie_line(name: str, value: str, path: str, secure: bool) -> str:
    return f"{name}={value}; HttpOnly; Path={path}; SameSite=Lax" + ("; Secure" if secure else "")


def _login_again(request: Request, task_id: int) -> Response:
    """No session here: a page is sent to the master's origin (which sends it back with a grant once
    its visitor is logged in to Airflow); anything else is refused."""
    if request.method in ("GET", "HEAD") and request.headers.get("sec-fetch-mode", "navigate") == "navigate":
        parts = urlsplit(task_origin.public_url())
        return RedirectResponse(
            f"{parts.scheme}://{parts.netloc}{_raw_target(request.scope)}", status.HTTP_303_SEE_OTHER
        )
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED, f"no session for task {task_id}: open it from Airflow again"
    )


@task_router.websocket("/proxy/{task_id}/{path:path}")
async def task_websocket(websocket: WebSocket, task_id: int, path: str) -> None:
    """Relay a WebSocket (a kernel's channels, a terminal) of this origin's own pages."""
    _refuse_other_origins(websocket, task_id, f"WebSocket {websocket.url.path}")
    user = await run_in_threadpool(_session_user, websocket, task_id)
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, f"no session for task {task_id}: open it from Airflow again"
        )
    target = await run_in_threadpool(_target, Caller(user), task_id)
    own = await run_in_threadpool(
        task_origin.names_of, websocket.cookies.get(task_origin.OWN_COOKIES_COOKIE), task_id
    )
    cookies = proxy_cookies.cookie_header(websocket.headers.getlist("cookie"), own)
    upstream = await _connect_upstream(websocket, task_id, path, target, cookies)
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _relay(websocket, upstream)


_STATUS = ((PermissionDenied, 403), (NotFound, 404), (StateError, 409))


def _task_origin_app() -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(task_router)

    @app.exception_handler(DetError)
    async def _det_error(_request: Request, exc: DetError) -> JSONResponse:
        code = next((code for kind, code in _STATUS if isinstance(exc, kind)), 400)
        return JSONResponse({"detail": str(exc)}, status_code=code)

    return app


class TaskOrigins:
    """ASGI middleware of the master's app: a request to a task's host name goes to that task's
    origin (only its own prefix; anything else there is 404); every other request is the master's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.task_app = _task_origin_app()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if task_origin.looks_like_task_host(host):
                try:
                    hosts = task_origin.task_hosts()
                except DetError as exc:  # a bad [det] task_proxy_host: said, not a 500
                    await _answer(scope, receive, send, 503, str(exc))
                    return
                task_id = hosts.task_of(host) if hosts is not None else None
                if task_id is not None:
                    path = scope["path"].removeprefix(scope.get("root_path", ""))
                    if path == f"/proxy/{task_id}" or path.startswith(f"/proxy/{task_id}/"):
                        await self.task_app(scope, receive, send)
                    else:
                        where = _browser_prefix(scope, task_id)
                        await _answer(
                            scope, receive, send, 404, f"this host serves task {task_id} only, under {where}"
                        )
                    return
        await self.app(scope, receive, send)


async def _answer(scope: Scope, receive: Receive, send: Send, status_code: int, detail: str) -> None:
    """An HTTP answer, or for a WebSocket the same answer to its handshake."""
    response = JSONResponse({"detail": detail}, status_code=status_code)
    if scope["type"] == "websocket":
        await WebSocket(scope, receive, send).send_denial_response(response)
        return
    await response(scope, receive, send)


# --- relaying a WebSocket -------------------------------------------------------------------------


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
