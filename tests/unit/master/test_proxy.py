"""The master's proxy to tasks' servers (``/det/proxy/<id>/...``), against a real server on loopback
that answers with what it received: who gets through, what reaches the task's server (its secret,
never the caller's Airflow login), and that bodies, cookies and WebSocket messages come back whole."""

from __future__ import annotations

import hashlib
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from fastapi import HTTPException, WebSocket
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from det_airflow.master import proxy, schema, trials
from det_airflow.tasks import SECRET_HEADER
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import ORIGIN, ROLES, People

SECRET = "task-secret-0123456789abcdef"
BIG = random.Random(7).randbytes(10 * 1024**2)
SLOT_TASK = {"run_id": "r", "task_id": "trial", "map_index": 0, "try_number": 1}
LOGIN_COOKIES = "_token=alice-airflow-login; _xsrf=2|abc; _token_refresh=also-login; theme=dark"


@dataclass
class Upstream:
    """A task's server as the proxy sees one: it refuses requests without the secret, and answers
    with what it received."""

    port: int = 0
    closes: list[int] = field(default_factory=list)

    def app(self) -> Starlette:
        def refused(request: Request | WebSocket) -> bool:
            return request.headers.get(SECRET_HEADER) != SECRET

        def seen(request: Request | WebSocket) -> dict[str, Any]:
            return {
                "path": request.scope["raw_path"].decode(),
                "query": request.scope["query_string"].decode(),
                "headers": [[name, value] for name, value in request.headers.items()],
            }

        async def http(request: Request) -> Response:
            if refused(request):
                return Response(f"missing or wrong {SECRET_HEADER} header\n", status_code=403)
            rest = request.path_params["rest"]
            if rest == "big":
                chunks = (BIG[i : i + 65536] for i in range(0, len(BIG), 65536))
                return StreamingResponse(iter(chunks), headers={"Content-Length": str(len(BIG))})
            if rest == "cookies":
                response = Response("cookies")
                prefix = f"/det/proxy/{request.path_params['task_id']}/"
                for cookie in (
                    f"_xsrf=2|abc; Path={prefix}",
                    "wide=1; Path=/; Domain=example.org; HttpOnly",
                    "_token=forged; Path=/",
                    "_token_refresh=forged",
                ):
                    response.headers.append("Set-Cookie", cookie)
                return response
            if rest == "redirect":
                location = f"http://127.0.0.1:{self.port}/det/proxy/{request.path_params['task_id']}/lab"
                return Response(status_code=302, headers={"Location": location})
            body = await request.body()
            return JSONResponse(
                {
                    **seen(request),
                    "method": request.method,
                    "body_sha256": hashlib.sha256(body).hexdigest(),
                }
            )

        async def echo(websocket: WebSocket) -> None:
            if refused(websocket):
                await websocket.close(4403)
                return
            offered = websocket.scope.get("subprotocols") or []
            await websocket.accept(subprotocol=offered[0] if offered else None)
            await websocket.send_json(seen(websocket))
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.closes.append(int(message.get("code") or 0))
                    return
                if message.get("text") == "close, please":
                    await websocket.close(4321, "bye")
                    return
                if message.get("bytes") is not None:
                    await websocket.send_bytes(message["bytes"])
                else:
                    await websocket.send_text(message["text"])

        return Starlette(
            routes=[
                WebSocketRoute("/det/proxy/{task_id:int}/ws", echo),
                Route("/det/proxy/{task_id:int}/{rest:path}", http, methods=proxy._METHODS),
            ]
        )


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server_state = Upstream()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        server_state.port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(server_state.app(), host="127.0.0.1", port=server_state.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the stand-in task server did not start")
        time.sleep(0.02)
    yield server_state
    server.should_exit = True
    thread.join(timeout=10)


async def _websocket_user_from_header(websocket: WebSocket) -> SimpleAuthManagerUser:
    name = websocket.headers.get("x-test-user")
    if name is None:
        raise HTTPException(401, "Not authenticated")
    return SimpleAuthManagerUser(username=name, role=ROLES[name])


@pytest.fixture
def site(people: People, creator: Creator) -> Iterator[People]:
    """The people app, its WebSocket login replaced as its HTTP login is (the ``X-Test-User`` header)."""
    overrides = people.client.app.dependency_overrides  # type: ignore[attr-defined]
    overrides[proxy.websocket_user] = _websocket_user_from_header
    yield people
    overrides.pop(proxy.websocket_user, None)


def login(user: str, **extra: str) -> dict[str, str]:
    return {"X-Test-User": user, "Authorization": f"Bearer login-of-{user}", **extra}


def serving(people: People, owner: str, port: int, task_type: str = "notebook", **body: Any) -> int:
    """A task whose server listens on ``port``, running as its trial's first report makes it."""
    created = people.call(owner, "POST", "/tasks", json={"type": task_type, **body})
    assert created.status_code == 200, created.text
    task_id = int(created.json()["task"]["id"])
    with people.db.begin() as conn:
        answer = trials.acquire(
            conn, task_id, 0, {**SLOT_TASK, "dag_id": f"det_exp_{task_id}"}, dry_run=False
        )
    assert answer["status"] == "run", answer
    trial_id = people.call(owner, "GET", f"/tasks/{task_id}").json()["task"]["trial_id"]
    ready = people.client.post(
        f"/api/v1/runtime/trials/{trial_id}/task/ready",
        headers={"Authorization": f"Bearer {answer['token']}"},
        json={"port": port, "secret": SECRET},
    )
    assert ready.status_code == 200, ready.text
    with people.db.begin() as conn:
        conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(state="RUNNING"))
    assert people.call(owner, "GET", f"/tasks/{task_id}").json()["task"]["ready"] is True
    return task_id


def headers_seen(answer: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in answer["headers"]:
        found.setdefault(name, []).append(value)
    return found


def test_the_secret_goes_up_and_the_callers_airflow_login_never_does(
    site: People, upstream: Upstream
) -> None:
    task_id = serving(site, "alice", upstream.port)
    answer = site.client.get(
        f"/proxy/{task_id}/api/contents/my%20dir/a%2Fb.ipynb?content=1&x=%26y",
        headers=login("alice", Cookie=LOGIN_COOKIES, **{SECRET_HEADER: "chosen-by-the-caller"}),
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["path"] == f"/det/proxy/{task_id}/api/contents/my%20dir/a%2Fb.ipynb"
    assert seen["query"] == "content=1&x=%26y"
    headers = headers_seen(seen)
    assert headers[SECRET_HEADER.lower()] == [SECRET]
    assert headers["authorization"] == [f"token {SECRET}"]  # a notebook's token, not Alice's login
    assert headers["cookie"] == ["_xsrf=2|abc; theme=dark"]
    assert "alice-airflow-login" not in json.dumps(seen)
    assert "also-login" not in json.dumps(seen)

    experiment = site.add_experiment(owner="alice")
    site.add_trial(experiment, state="COMPLETED")
    board = serving(site, "alice", upstream.port, "tensorboard", experiment_ids=[experiment])
    seen = site.client.get(f"/proxy/{board}/", headers=login("alice")).json()
    assert seen["path"] == f"/det/proxy/{board}/"
    assert "authorization" not in headers_seen(seen)  # a TensorBoard asks the secret header only


def test_a_body_goes_up_and_a_large_answer_comes_back_whole(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    body = random.Random(3).randbytes(3 * 1024**2)
    posted = site.client.put(f"/proxy/{task_id}/api/contents/data.bin", headers=login("alice"), content=body)
    assert posted.status_code == 200, posted.text
    assert posted.json()["method"] == "PUT"
    assert posted.json()["body_sha256"] == hashlib.sha256(body).hexdigest()

    big = site.client.get(f"/proxy/{task_id}/big", headers=login("alice"))
    assert big.status_code == 200
    assert big.headers["content-length"] == str(len(BIG))
    assert hashlib.sha256(big.content).hexdigest() == hashlib.sha256(BIG).hexdigest()


def test_a_form_from_the_masters_own_page_passes_and_one_from_another_site_does_not(
    site: People, upstream: Upstream
) -> None:
    """TensorBoard's pages post forms; a page of another site must not post with the user's login."""
    task_id = serving(site, "alice", upstream.port)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    own = site.client.post(
        f"/proxy/{task_id}/data/plugin/scalars/scalars_multirun",
        headers=login("alice", Origin=ORIGIN, **form),
        content=b"tag=loss&runs=exp1",
    )
    assert own.status_code == 200, own.text
    assert own.json()["body_sha256"] == hashlib.sha256(b"tag=loss&runs=exp1").hexdigest()
    foreign = site.client.post(
        f"/proxy/{task_id}/api/kernels", headers=login("alice", Origin="http://evil.example", **form)
    )
    assert foreign.status_code == 403
    assert "http://evil.example" in foreign.json()["detail"]
    fetched = site.client.post(
        f"/proxy/{task_id}/api/kernels", headers=login("alice", **{"Sec-Fetch-Site": "cross-site"})
    )
    assert fetched.status_code == 403


def test_cookies_the_server_sets_stay_within_the_tasks_prefix(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    answer = site.client.get(f"/proxy/{task_id}/cookies", headers=login("alice"))
    assert answer.status_code == 200
    prefix = f"/det/proxy/{task_id}/"
    assert answer.headers.get_list("set-cookie") == [
        f"_xsrf=2|abc; Path={prefix}",
        f"wide=1; HttpOnly; Path={prefix}",
    ]


def test_redirects_lead_back_through_the_proxy(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    moved = site.client.get(f"/proxy/{task_id}/redirect", headers=login("alice"), follow_redirects=False)
    assert moved.status_code == 302
    assert moved.headers["location"] == f"/det/proxy/{task_id}/lab"
    bare = site.client.get(f"/proxy/{task_id}?a=1", headers=login("alice"), follow_redirects=False)
    assert bare.status_code == 307
    assert bare.headers["location"] == f"/det/proxy/{task_id}/?a=1"


def test_who_may_open_what_and_when(site: People, upstream: Upstream) -> None:
    notebook = serving(site, "alice", upstream.port)
    refused = site.client.get(f"/proxy/{notebook}/lab", headers=login("bob"))
    assert refused.status_code == 403
    assert "only its owner or an admin may" in refused.json()["detail"]
    assert site.client.get(f"/proxy/{notebook}/lab", headers=login("admin")).status_code == 200
    assert site.client.get(f"/proxy/{notebook}/lab").status_code == 401

    unknown = site.client.get("/proxy/999/lab", headers=login("alice"))
    assert unknown.status_code == 404
    assert "task 999 not found" in unknown.json()["detail"]

    queued = site.call("alice", "POST", "/tasks", json={"type": "notebook"}).json()["task"]["id"]
    waiting = site.client.get(f"/proxy/{queued}/lab", headers=login("alice"))
    assert waiting.status_code == 409
    assert waiting.json()["detail"] == f"notebook {queued} is not serving: it is QUEUED"


def test_a_server_that_does_not_answer_is_a_bad_gateway(site: People) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once the probe is closed
    task_id = serving(site, "alice", port)
    answer = site.client.get(f"/proxy/{task_id}/lab", headers=login("alice"))
    assert answer.status_code == 502
    assert answer.json()["detail"].startswith(f"notebook {task_id} does not answer: ")
    with pytest.raises(WebSocketDenialResponse) as denied:
        with site.client.websocket_connect(f"/proxy/{task_id}/ws", headers=login("alice")):
            pass
    assert denied.value.status_code == 502


def test_websocket_messages_pass_both_ways_with_their_close_codes(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    kernel = "v1.kernel.websocket.jupyter.org"
    with site.client.websocket_connect(
        f"/proxy/{task_id}/ws?session_id=s%201",
        headers=login("alice", Cookie=LOGIN_COOKIES, Origin=ORIGIN),
        subprotocols=[kernel],
    ) as ws:
        assert ws.accepted_subprotocol == kernel
        seen = ws.receive_json()
        assert seen["path"] == f"/det/proxy/{task_id}/ws"
        assert seen["query"] == "session_id=s%201"
        headers = headers_seen(seen)
        assert headers[SECRET_HEADER.lower()] == [SECRET]
        assert headers["authorization"] == [f"token {SECRET}"]
        assert headers["cookie"] == ["_xsrf=2|abc; theme=dark"]
        ws.send_text("print(1)")
        assert ws.receive_text() == "print(1)"
        large = random.Random(5).randbytes(5 * 1024**2)  # over websockets' 1 MiB default
        ws.send_bytes(large)
        assert ws.receive_bytes() == large
        ws.send_text("close, please")
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert (closed.value.code, closed.value.reason) == (4321, "bye")

    with site.client.websocket_connect(f"/proxy/{task_id}/ws", headers=login("alice")) as ws:
        ws.receive_json()
        ws.close(4001)
    deadline = time.monotonic() + 10
    while 4001 not in upstream.closes and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 4001 in upstream.closes


def test_websockets_refuse_other_users_and_other_sites(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    cases = [
        (login("bob"), 403, "only its owner or an admin may"),
        (
            login("alice", Origin="http://evil.example"),
            403,
            "refused a request from origin 'http://evil.example'",
        ),
        ({}, 401, "Not authenticated"),
    ]
    for headers, status, detail in cases:
        with pytest.raises(WebSocketDenialResponse) as denied:
            with site.client.websocket_connect(f"/proxy/{task_id}/ws", headers=headers):
                pass
        assert denied.value.status_code == status, headers
        assert detail in denied.value.json()["detail"], headers


@pytest.fixture
def fresh_jwt_keys() -> Iterator[None]:
    """Airflow's auth manager keeps its JWT signer and validator once made (per class): made again
    for a test that sets its own secret, and again after it for the tests that follow."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager

    def clear() -> None:
        BaseAuthManager._get_token_signer.cache_clear()  # type: ignore[attr-defined]
        BaseAuthManager._get_token_validator.cache_clear()  # type: ignore[attr-defined]

    clear()
    yield
    clear()


def test_a_websocket_login_is_airflows_token(
    people: People,
    creator: Creator,
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    fresh_jwt_keys: None,
) -> None:
    """Without the test's stand-in: the JWT Airflow signs at login opens a WebSocket, as a bearer
    token or as the login cookie, for whoever may open the task, and nothing else does."""
    from airflow import settings
    from airflow.models.revoked_token import RevokedToken

    from det_airflow.airflow_compat import get_auth_manager

    RevokedToken.__table__.create(settings.engine, checkfirst=True)  # where logouts are kept
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "j" * 64)
    manager = get_auth_manager()
    tokens = {
        name: manager.generate_jwt(SimpleAuthManagerUser(username=name, role=ROLES[name])) for name in ROLES
    }
    task_id = serving(people, "alice", upstream.port)
    for headers in ({"Authorization": f"Bearer {tokens['alice']}"}, {"Cookie": f"_token={tokens['alice']}"}):
        with people.client.websocket_connect(f"/proxy/{task_id}/ws", headers=headers) as ws:
            assert "authorization" in headers_seen(ws.receive_json())
    for headers, status in (
        ({}, 401),
        ({"Authorization": "Bearer not-a-jwt"}, 403),
        ({"Cookie": "_token=not-a-jwt"}, 403),
        ({"Authorization": f"Bearer {tokens['bob']}"}, 403),
    ):
        with pytest.raises(WebSocketDenialResponse) as denied:
            with people.client.websocket_connect(f"/proxy/{task_id}/ws", headers=headers):
                pass
        assert denied.value.status_code == status, headers


@pytest.mark.parametrize(
    ("set_cookie", "kept"),
    [
        ("a=1", "a=1; Path=/det/proxy/7/"),
        ("a=1; Path=/det/proxy/7/lab; Secure", "a=1; Secure; Path=/det/proxy/7/lab"),
        ("a=1; path=/det/; SameSite=Lax", "a=1; SameSite=Lax; Path=/det/proxy/7/"),
        ("a=1; Path=/det/proxy/70/", "a=1; Path=/det/proxy/7/"),
        ("_token=x; Path=/det/proxy/7/", None),
        ("__Host-a=1; Path=/; Secure", None),
    ],
)
def test_confine_cookie(set_cookie: str, kept: str | None) -> None:
    assert proxy.confine_cookie(set_cookie, "/det/proxy/7/") == kept
