"""The master's proxy to tasks' servers (``/det/proxy/<id>/...``), against a real server on loopback
that answers with what it received: who gets through, what reaches the task's server (its secret,
never the caller's Airflow login nor any cookie of Airflow's or FAB's), that a browser is served the
task's pages only on the task's own origin, and that bodies, cookies and WebSocket messages come
back whole."""

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
from urllib.parse import parse_qs, urlsplit

import jwt
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

from det_airflow.master import proxy, proxy_cookies, schema, trials
from det_airflow.tasks import SECRET_HEADER
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import ORIGIN, ROLES, SERVICE_TOKEN, People

SECRET = "task-secret-0123456789abcdef"
BIG = random.Random(7).randbytes(10 * 1024**2)
SLOT_TASK = {"run_id": "r", "task_id": "trial", "map_index": 0, "try_number": 1}
LOGIN_COOKIES = "_token=alice-airflow-login; _xsrf=2|abc; _token_refresh=also-login; theme=dark"
# What a browser logged in to Airflow under FAB sends: FAB's Flask session alone mints a new Airflow
# token for its holder.
FAB_COOKIES = "session=alice-fab-session; remember_token=alice-remembered; _token=alice-airflow-login"
TASK_HOSTS = "*.tasks.testserver"


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
                    "session=forged-fab-session; Path=/",
                    "det_task_session=forged; Path=/",
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
def site(
    people: People, creator: Creator, service_headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[People]:
    """The people app, its WebSocket login replaced as its HTTP login is (the ``X-Test-User`` header),
    its tasks served at task-<id>.tasks.testserver."""
    monkeypatch.setenv("AIRFLOW__DET__TASK_PROXY_HOST", TASK_HOSTS)
    overrides = people.client.app.dependency_overrides  # type: ignore[attr-defined]
    overrides[proxy.websocket_user] = _websocket_user_from_header
    yield people
    overrides.pop(proxy.websocket_user, None)


def login(user: str, **extra: str) -> dict[str, str]:
    return {"X-Test-User": user, "Authorization": f"Bearer login-of-{user}", **extra}


def serving(people: People, owner: str, port: int, task_type: str = "notebook", **body: Any) -> int:
    """A task whose server listens on ``port``, running as its runner's report makes it."""
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
        f"/api/v1/internal/trials/{trial_id}/task/ready",
        headers={"Authorization": f"Bearer {SERVICE_TOKEN}"},
        json={"port": port, "secret": SECRET, "address": "127.0.0.1"},
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


def test_the_secret_goes_up_and_no_login_or_cookie_of_the_caller_does(
    site: People, upstream: Upstream
) -> None:
    """A bearer client on the master's origin (the CLI): the task's secret goes up; the caller's
    Airflow login, FAB's session and every other cookie stay behind."""
    task_id = serving(site, "alice", upstream.port)
    answer = site.client.get(
        f"/proxy/{task_id}/api/contents/my%20dir/a%2Fb.ipynb?content=1&x=%26y",
        headers=login(
            "alice", Cookie=f"{LOGIN_COOKIES}; {FAB_COOKIES}", **{SECRET_HEADER: "chosen-by-the-caller"}
        ),
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["path"] == f"/det/proxy/{task_id}/api/contents/my%20dir/a%2Fb.ipynb"
    assert seen["query"] == "content=1&x=%26y"
    headers = headers_seen(seen)
    assert headers[SECRET_HEADER.lower()] == [SECRET]
    assert headers["authorization"] == [f"token {SECRET}"]  # a notebook's token, not Alice's login
    assert "cookie" not in headers
    for login_part in ("alice-airflow-login", "also-login", "alice-fab-session", "alice-remembered"):
        assert login_part not in json.dumps(seen)

    experiment = site.add_experiment(owner="alice")
    site.add_trial(experiment, state="COMPLETED")
    board = serving(site, "alice", upstream.port, "tensorboard", experiment_ids=[experiment])
    seen = site.client.get(f"/proxy/{board}/", headers=login("alice")).json()
    assert seen["path"] == f"/det/proxy/{board}/"
    assert "authorization" not in headers_seen(seen)  # a TensorBoard asks the secret header only


def test_what_the_masters_origin_serves_of_a_task_runs_nothing_there(
    site: People, upstream: Upstream
) -> None:
    """Even opened in a browser, an answer of a task's server on the master's origin is sandboxed
    (no script, no cookie of the master's), and sets no cookie there."""
    task_id = serving(site, "alice", upstream.port)
    answer = site.client.get(f"/proxy/{task_id}/cookies", headers=login("alice"))
    assert answer.status_code == 200
    assert answer.headers["content-security-policy"] == "sandbox"
    assert answer.headers.get_list("set-cookie") == []


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


def test_redirects_lead_back_through_the_proxy(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    moved = site.client.get(f"/proxy/{task_id}/redirect", headers=login("alice"), follow_redirects=False)
    assert moved.status_code == 302
    assert moved.headers["location"] == f"/det/proxy/{task_id}/lab"
    bare = site.client.get(f"/proxy/{task_id}?a=1", headers=login("alice"), follow_redirects=False)
    assert bare.status_code == 307
    assert bare.headers["location"] == f"/proxy/{task_id}/?a=1"


def test_who_may_open_what_and_when(site: People, upstream: Upstream) -> None:
    notebook = serving(site, "alice", upstream.port)
    refused = site.client.get(f"/proxy/{notebook}/lab", headers=login("bob"))
    assert refused.status_code == 403
    assert "only its owner or an admin may" in refused.json()["detail"]
    assert site.client.get(f"/proxy/{notebook}/lab", headers=login("admin")).status_code == 200
    assert site.client.get(f"/proxy/{notebook}/lab").status_code == 401
    # A browser too: the same check comes before it is sent anywhere.
    browser_refused = site.client.get(
        f"/proxy/{notebook}/lab", headers=browser("bob"), follow_redirects=False
    )
    assert browser_refused.status_code == 403

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
        headers=login("alice", Cookie=f"{LOGIN_COOKIES}; {FAB_COOKIES}", Origin=ORIGIN),
        subprotocols=[kernel],
    ) as ws:
        assert ws.accepted_subprotocol == kernel
        seen = ws.receive_json()
        assert seen["path"] == f"/det/proxy/{task_id}/ws"
        assert seen["query"] == "session_id=s%201"
        headers = headers_seen(seen)
        assert headers[SECRET_HEADER.lower()] == [SECRET]
        assert headers["authorization"] == [f"token {SECRET}"]
        assert "cookie" not in headers
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
        # A browser's WebSocket (the login cookie alone) belongs on the task's own origin.
        (browser("alice"), 403, "on the task's own origin"),
    ]
    for headers, status, detail in cases:
        with pytest.raises(WebSocketDenialResponse) as denied:
            with site.client.websocket_connect(f"/proxy/{task_id}/ws", headers=headers):
                pass
        assert denied.value.status_code == status, headers
        assert detail in denied.value.json()["detail"], headers


# --- a browser: the task's own origin -------------------------------------------------------------


def browser(user: str, **extra: str) -> dict[str, str]:
    """What a browser logged in to Airflow sends: the login cookie, no bearer token (the people app
    reads who it is from X-Test-User)."""
    return {"X-Test-User": user, "Cookie": f"_token=login-of-{user}", **extra}


def task_host(task_id: int) -> str:
    return f"http://task-{task_id}.tasks.testserver"


def sign_in(site: People, user: str, task_id: int, path: str = "") -> Any:
    """Open ``/proxy/<id>/<path>`` on the master's origin as a browser does, following its redirects
    to the task's origin; answers the last answer (the client keeps the task origin's cookies)."""
    first = site.client.get(f"/proxy/{task_id}/{path}", headers=browser(user), follow_redirects=False)
    assert first.status_code == 303, first.text
    login_answer = site.client.get(first.headers["location"], follow_redirects=False)
    assert login_answer.status_code == 303, login_answer.text
    return site.client.get(task_host(task_id) + login_answer.headers["location"], follow_redirects=False)


def cookies_with(site: People, task_id: int, others: str) -> dict[str, str]:
    """A Cookie header as the browser sends it to the task's origin: what that origin set (the
    client's jar), and ``others`` (cookies a parent domain or a script put there)."""
    domain = f"task-{task_id}.tasks.testserver"
    held = [f"{c.name}={c.value}" for c in site.client.cookies.jar if c.domain.lstrip(".") == domain]
    return {"Cookie": "; ".join([*held, others])}


def test_a_browser_is_sent_to_the_tasks_own_origin_never_served_on_the_masters(
    site: People, upstream: Upstream
) -> None:
    """What a task serves runs its owner's code: on the master's origin it would run with the
    visitor's Airflow login. A browser gets a redirect there, not the task's content."""
    task_id = serving(site, "alice", upstream.port)
    first = site.client.get(f"/proxy/{task_id}/lab?reset=1", headers=browser("admin"), follow_redirects=False)
    assert first.status_code == 303, first.text
    assert "det_task" not in first.text and SECRET not in first.text
    location = urlsplit(first.headers["location"])
    assert f"{location.scheme}://{location.netloc}" == task_host(task_id)
    assert location.path == f"/proxy/{task_id}/_det/login"
    query = parse_qs(location.query)
    assert query["next"] == [f"/proxy/{task_id}/lab?reset=1"]
    assert first.headers["referrer-policy"] == "no-referrer"

    taken = site.client.get(first.headers["location"], follow_redirects=False)
    assert taken.status_code == 303
    assert taken.headers["location"] == f"/proxy/{task_id}/lab?reset=1"
    (session,) = taken.headers.get_list("set-cookie")
    assert session.startswith("det_task_session=")
    for attribute in ("HttpOnly", f"Path=/proxy/{task_id}/", "SameSite=lax"):
        assert attribute in session
    assert "Domain" not in session

    page = site.client.get(
        task_host(task_id) + taken.headers["location"], headers=cookies_with(site, task_id, FAB_COOKIES)
    )
    assert page.status_code == 200, page.text
    seen = page.json()
    assert seen["path"] == f"/det/proxy/{task_id}/lab" and seen["query"] == "reset=1"
    assert headers_seen(seen)[SECRET_HEADER.lower()] == [SECRET]
    assert "cookie" not in headers_seen(seen)
    assert "content-security-policy" not in page.headers  # its own origin: the page runs as written


def test_fabs_session_and_cookies_the_task_did_not_set_never_reach_its_server(
    site: People, upstream: Upstream
) -> None:
    """Only cookies the task's server set itself go up, never one named like Airflow's or FAB's, even
    one the server tried to set."""
    task_id = serving(site, "alice", upstream.port)
    sign_in(site, "alice", task_id)
    host = task_host(task_id)
    others = f"{FAB_COOKIES}; theme=dark; _xsrf=written-by-a-script"
    seen = site.client.get(
        f"{host}/proxy/{task_id}/api/status", headers=cookies_with(site, task_id, others)
    ).json()
    assert "cookie" not in headers_seen(seen)

    set_by_server = site.client.get(f"{host}/proxy/{task_id}/cookies")
    prefix = f"/proxy/{task_id}/"
    returned = set_by_server.headers.get_list("set-cookie")
    assert returned[:2] == [f"_xsrf=2|abc; Path={prefix}", f"wide=1; HttpOnly; Path={prefix}"]
    assert [c.split("=", 1)[0] for c in returned[2:]] == ["det_task_cookies"]
    assert not any(c.startswith(("_token", "session", "det_task_session")) for c in returned)

    seen = site.client.get(
        f"{host}/proxy/{task_id}/api/status", headers=cookies_with(site, task_id, FAB_COOKIES)
    ).json()
    (sent,) = headers_seen(seen)["cookie"]
    assert sorted(sent.split("; ")) == ["_xsrf=2|abc", "wide=1"]
    for login_part in ("alice-airflow-login", "alice-fab-session", "alice-remembered", "det_task"):
        assert login_part not in json.dumps(seen)


def test_a_grant_opens_one_task_once_for_one_user_within_a_minute(
    site: People, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from det_airflow.master import task_origin

    mine = serving(site, "alice", upstream.port)
    theirs = serving(site, "bob", upstream.port)
    first = site.client.get(f"/proxy/{mine}/", headers=browser("alice"), follow_redirects=False)
    grant = parse_qs(urlsplit(first.headers["location"]).query)["grant"][0]

    # A grant for task 7 does not open task 8.
    elsewhere = site.client.get(
        f"{task_host(theirs)}/proxy/{theirs}/_det/login?grant={grant}", follow_redirects=False
    )
    assert elsewhere.status_code == 403
    assert "for another task" in elsewhere.text
    assert site.client.cookies.get("det_task_session") is None
    # It opens its own task once: a copy of its URL (a history, a log) opens nothing after.
    taken = site.client.get(
        f"{task_host(mine)}/proxy/{mine}/_det/login?grant={grant}", follow_redirects=False
    )
    assert taken.status_code == 303 and "det_task_session" in taken.headers["set-cookie"]
    site.client.cookies.clear()
    again = site.client.get(
        f"{task_host(mine)}/proxy/{mine}/_det/login?grant={grant}", follow_redirects=False
    )
    assert again.status_code == 403 and "the grant has been used already" in again.text
    assert "set-cookie" not in again.headers
    # Nor does anything the master did not sign, nor an expired grant.
    forged = jwt.encode({"aud": "det-task-grant", "task": mine, "exp": 2**40}, "k" * 32, algorithm="HS256")
    monkeypatch.setattr(task_origin, "GRANT_SECONDS", -1)
    expired = task_origin.grant(SimpleAuthManagerUser(username="alice", role="user"), mine)
    for bad in (forged, expired, "not-a-grant"):
        refused = site.client.get(
            f"{task_host(mine)}/proxy/{mine}/_det/login?grant={bad}", follow_redirects=False
        )
        assert refused.status_code == 403, bad
    expired_answer = site.client.get(
        f"{task_host(mine)}/proxy/{mine}/_det/login?grant={expired}", follow_redirects=False
    )
    assert "has expired" in expired_answer.text

    # A session is for its task's origin and user; the user's rights are checked at every request.
    bobs = task_origin.session(SimpleAuthManagerUser(username="bob", role="user"), mine)
    as_bob = site.client.get(
        f"{task_host(mine)}/proxy/{mine}/lab", headers={"Cookie": f"det_task_session={bobs}"}
    )
    assert as_bob.status_code == 403
    assert "only its owner or an admin may" in as_bob.json()["detail"]
    alices_for_mine = task_origin.session(SimpleAuthManagerUser(username="alice", role="user"), mine)
    other_origin = site.client.get(
        f"{task_host(theirs)}/proxy/{theirs}/lab",
        headers={"Cookie": f"det_task_session={alices_for_mine}", "Sec-Fetch-Mode": "cors"},
    )
    assert other_origin.status_code == 401


def test_a_task_origin_without_a_session_sends_a_page_back_to_the_master(
    site: People, upstream: Upstream
) -> None:
    task_id = serving(site, "alice", upstream.port)
    page = site.client.get(f"{task_host(task_id)}/proxy/{task_id}/lab?x=1", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == f"{ORIGIN}/proxy/{task_id}/lab?x=1"
    fetched = site.client.get(
        f"{task_host(task_id)}/proxy/{task_id}/api/status",
        headers={"Sec-Fetch-Mode": "cors", "Authorization": "Bearer login-of-alice", "X-Test-User": "alice"},
    )
    assert fetched.status_code == 401  # Airflow's login is no login here


def test_a_task_origin_takes_changes_and_websockets_only_from_its_own_pages(
    site: People, upstream: Upstream
) -> None:
    task_id = serving(site, "alice", upstream.port)
    sign_in(site, "alice", task_id)
    host = task_host(task_id)
    own = site.client.post(f"{host}/proxy/{task_id}/api/kernels", headers={"Origin": host}, content=b"{}")
    assert own.status_code == 200, own.text
    for headers in ({"Origin": ORIGIN}, {"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "same-site"}):
        refused = site.client.post(f"{host}/proxy/{task_id}/api/kernels", headers=headers, content=b"{}")
        assert refused.status_code == 403, headers
    cookie = cookies_with(site, task_id, FAB_COOKIES)
    with site.client.websocket_connect(
        f"ws://task-{task_id}.tasks.testserver/proxy/{task_id}/ws", headers={"Origin": host, **cookie}
    ) as ws:
        seen = ws.receive_json()
        assert headers_seen(seen)[SECRET_HEADER.lower()] == [SECRET]
        assert "cookie" not in headers_seen(seen)
    for headers in ({**cookie, "Origin": ORIGIN}, {"Origin": host, "Cookie": FAB_COOKIES}):
        with pytest.raises(WebSocketDenialResponse) as denied:
            with site.client.websocket_connect(
                f"ws://task-{task_id}.tasks.testserver/proxy/{task_id}/ws", headers=headers
            ):
                pass
        assert denied.value.status_code in (401, 403), headers


def test_a_task_host_serves_that_task_only(site: People, upstream: Upstream) -> None:
    task_id = serving(site, "alice", upstream.port)
    other = serving(site, "alice", upstream.port)
    sign_in(site, "alice", task_id)
    host = task_host(task_id)
    for path in ("/api/v1/me", "/api/v1/tasks", f"/proxy/{other}/lab", "/ui/"):
        answer = site.client.get(host + path, headers={"X-Test-User": "alice", "Authorization": "Bearer x"})
        assert answer.status_code == 404, path
        assert f"serves task {task_id} only" in answer.json()["detail"]


def test_without_a_task_origin_a_browser_gets_an_explanation_not_the_page(
    people: People, creator: Creator, service_headers: dict[str, str], upstream: Upstream
) -> None:
    """A master that is not on loopback and names no ``[det] task_proxy_host`` serves tasks' pages
    to no browser; bearer clients keep working."""
    task_id = serving(people, "alice", upstream.port)
    page = people.client.get(f"/proxy/{task_id}/", headers=browser("alice"), follow_redirects=False)
    assert page.status_code == 503
    assert page.headers["content-type"].startswith("text/html")
    assert "[det] task_proxy_host" in page.text
    assert SECRET not in page.text and "/det/proxy" not in page.text
    assert people.client.get(f"/proxy/{task_id}/", headers=login("alice")).status_code == 200


def test_a_master_on_loopback_serves_tasks_under_localhost(
    people: People,
    creator: Creator,
    service_headers: dict[str, str],
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quickstart needs no setting: every name under .localhost is loopback to browsers."""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://127.0.0.1:8080")
    task_id = serving(people, "alice", upstream.port)
    page = people.client.get(f"/proxy/{task_id}/", headers=browser("alice"), follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"].startswith(
        f"http://task-{task_id}.localhost:8080/proxy/{task_id}/_det/login?"
    )
    monkeypatch.setenv("AIRFLOW__DET__TASK_PROXY_HOST", "tasks.example.com")
    wrong = people.client.get(f"/proxy/{task_id}/", headers=browser("alice"), follow_redirects=False)
    assert wrong.status_code == 400
    assert "task_proxy_host: 'tasks.example.com' must be a host name whose first label is '*'" in wrong.text


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


def test_a_websocket_login_is_airflows_token_as_a_bearer(
    people: People,
    creator: Creator,
    service_headers: dict[str, str],
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    fresh_jwt_keys: None,
) -> None:
    """Without the test's stand-in: the JWT Airflow signs at login opens a WebSocket on the master's
    origin as a bearer token, for whoever may open the task, and nothing else does: not the login
    cookie, which only a browser sends."""
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
    with people.client.websocket_connect(
        f"/proxy/{task_id}/ws", headers={"Authorization": f"Bearer {tokens['alice']}"}
    ) as ws:
        assert "authorization" in headers_seen(ws.receive_json())
    for headers, status in (
        ({}, 401),
        ({"Authorization": "Bearer not-a-jwt"}, 403),
        ({"Cookie": f"_token={tokens['alice']}"}, 403),
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
        ("a=1; Domain=example.org", "a=1; Path=/det/proxy/7/"),
        ("_token=x; Path=/det/proxy/7/", None),
        ("session=x", None),
        ("remember_token=x", None),
        ("det_task_session=x", None),
        ("__Host-a=1; Path=/; Secure", None),
    ],
)
def test_confine_cookie(set_cookie: str, kept: str | None) -> None:
    confined = proxy_cookies.confine_cookie(set_cookie, "/det/proxy/7/")
    assert (None if confined is None else confined[1]) == kept
