"""A body over the anonymous limit is read only after its credential is found valid (an Airflow
login, a trial token or the service token), and only a few such bodies are read at once, so a
client with a made-up token cannot make the master hold hundreds of MiB."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.api_fastapi.core_api.security import get_user

from det_airflow.context_archive import format_size
from det_airflow.master.auth import hash_token
from det_airflow.master.limits import ANONYMOUS_BODY_LIMIT, LARGE_BODIES_PER_SENDER
from tests.unit.master.people_app import People

BIG = 120 * 1024**2


def _scope(path: str, headers: dict[str, str], length: int | None) -> dict[str, Any]:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"content-type", b"application/json"))
    if length is not None:
        raw.append((b"content-length", str(length).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": raw,
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }


class Client:
    """One request whose body arrives in 1 MiB chunks only when ``release`` is set."""

    def __init__(self, chunks: int = 120) -> None:
        self.pending = [b'{"label": "' + b"a" * (1024**2 - 11)] * chunks + [b'"}']
        self.read = 0
        self.release = asyncio.Event()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        await self.release.wait()
        if not self.pending:
            return {"type": "http.disconnect"}
        self.read += 1
        body = self.pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(self.pending)}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def answer(self) -> tuple[int, str]:
        status = next(m["status"] for m in self.sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return status, body.decode()


def _post(app: Any, client: Client, path: str, headers: dict[str, str], length: int | None = BIG) -> Any:
    return app(_scope(path, headers, length), client.receive, client.send)


def test_a_made_up_bearer_token_with_a_large_body_is_refused_before_the_body_is_read(people: People) -> None:
    app: Any = people.client.app
    del app.dependency_overrides[get_user]  # Airflow's own login check: the token is verified as a JWT
    path = "/api/v1/experiments"  # the create route: up to 133 MiB from a valid login

    async def run(headers: dict[str, str], length: int | None) -> Client:
        client = Client()
        client.release.set()
        await _post(app, client, path, headers, length)
        return client

    for headers in ({"Authorization": "Bearer x"}, {"Cookie": "_token=eyJmYWtl.eyJzdWIiOiJ4In0.c2ln"}):
        client = asyncio.run(run(headers, BIG))
        status, body = client.answer()
        assert status == 401
        assert (
            f"request body over {format_size(ANONYMOUS_BODY_LIMIT)} for POST {path} needs a valid login"
            in body
        )
        assert client.read == 0, "the master read the body of a request whose login was not valid"
    streamed = asyncio.run(run({"Authorization": "Bearer x"}, None))
    assert streamed.answer()[0] == 401
    assert streamed.read < 5, "a streamed body without Content-Length was read on past the small limit"


def test_a_trial_token_is_a_valid_credential_for_a_large_body(people: People) -> None:
    from sqlalchemy import update

    from det_airflow.master import schema

    app: Any = people.client.app
    del app.dependency_overrides[get_user]
    t = people.add_trial(people.add_experiment(owner="alice"), state="RUNNING")
    with people.db.begin() as conn:
        conn.execute(
            update(schema.trials).where(schema.trials.c.id == t).values(token_hash=hash_token("tok"))
        )
    client = Client(chunks=2)
    client.release.set()
    asyncio.run(
        _post(app, client, f"/api/v1/runtime/trials/{t}/progress", {"Authorization": "Bearer tok"}, 0)
    )
    assert client.answer()[0] != 401


def test_each_sender_has_only_a_few_large_bodies_in_flight(people: People) -> None:
    app: Any = people.client.app
    size = 10 * 1024**2
    e = people.add_experiment(owner="alice")
    path = f"/api/v1/experiments/{e}/labels"
    alice = {"X-Test-User": "alice", "Authorization": "Bearer login-of-alice"}
    bob = {"X-Test-User": "bob", "Authorization": "Bearer login-of-bob"}

    async def run() -> tuple[list[Client], Client, Client]:
        held = [Client(chunks=10) for _ in range(LARGE_BODIES_PER_SENDER)]
        tasks = [asyncio.create_task(_post(app, c, path, alice, size)) for c in held]
        await asyncio.sleep(0.2)  # both are now waiting for their bodies
        refused = Client()
        refused.release.set()
        await _post(app, refused, path, alice, size)
        others = Client(chunks=1)
        others.release.set()
        await _post(app, others, path, bob, length=1024**2 + 2)
        for client in held:
            client.release.set()
        await asyncio.gather(*tasks)
        return held, refused, others

    held, refused, bobs = asyncio.run(run())
    status, body = refused.answer()
    assert status == 429
    assert (
        f"alice already sends {LARGE_BODIES_PER_SENDER} bodies over {format_size(ANONYMOUS_BODY_LIMIT)}"
        in body
    )
    assert refused.read == 0
    assert bobs.answer()[0] != 429, "another user's bodies do not count"
    assert all(c.answer()[0] != 429 for c in held)
