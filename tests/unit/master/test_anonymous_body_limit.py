"""Only a client that sends a login may send a large body: without one, the master stops reading
at a few KiB, before any route (and its login check) runs."""

from __future__ import annotations

import asyncio
from typing import Any

from det_airflow.context_archive import format_size
from det_airflow.master import limits
from det_airflow.master.limits import ANONYMOUS_BODY_LIMIT, BODY_LIMIT, CREATE_BODY_LIMIT
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

JSON = {"content-type": "application/json"}


def test_a_large_create_without_a_login_is_refused_by_its_content_length(creator: Creator) -> None:
    answer = creator.people.call(
        None,
        "POST",
        "/experiments",
        content=b"{}",
        headers={**JSON, "content-length": str(CREATE_BODY_LIMIT)},
    )
    assert answer.status_code == 413
    assert answer.json()["detail"] == (
        f"request body: {format_size(CREATE_BODY_LIMIT)} is over the limit of "
        f"{format_size(ANONYMOUS_BODY_LIMIT)} for POST /api/v1/experiments without a login "
        "(send a bearer token or Airflow's login cookie)"
    )
    assert creator.count() == 0


def test_a_small_body_without_a_login_reaches_the_login_check(people: People) -> None:
    e = people.add_experiment(owner="alice")
    answer = people.call(None, "POST", f"/experiments/{e}/labels", json={"label": "x"})
    assert answer.status_code == 401


async def _stream_anonymously(app: Any, path: str, chunks: list[bytes]) -> tuple[int, bytes, int]:
    """POST without Content-Length or credentials; answers status, body and chunks left unread."""
    pending = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]
    pending.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body, len(pending)


def test_a_streamed_body_without_a_login_is_cut_off_at_the_small_limit(people: People) -> None:
    chunks = [b'{"config": "', *[b"a" * 16 * 1024] * 100]  # 1.6 MiB, far under the create limit
    status, body, unread = asyncio.run(_stream_anonymously(people.client.app, "/api/v1/experiments", chunks))
    assert status == 413
    assert f"more than {format_size(ANONYMOUS_BODY_LIMIT)} is over the limit" in body.decode()
    assert unread > 90, "the server read on past the limit for a client without a login"


def test_a_bearer_token_or_the_login_cookie_counts_as_a_login() -> None:
    assert limits.carries_credentials({b"authorization": b"Bearer abc"})
    assert limits.carries_credentials({b"cookie": b"theme=dark; _token=eyJabc"})
    assert not limits.carries_credentials({})
    assert not limits.carries_credentials({b"authorization": b"Basic YWxpY2U6cHc="})
    assert not limits.carries_credentials({b"authorization": b"Bearer "})
    assert not limits.carries_credentials({b"cookie": b"_token="})
    assert not limits.carries_credentials({b"cookie": b"session=abc"})


def test_the_limits_without_a_login_are_the_small_one() -> None:
    assert limits.body_limit("POST", "/det/api/v1/experiments", logged_in=False) == ANONYMOUS_BODY_LIMIT
    assert (
        limits.body_limit("POST", "/det/api/v1/experiments/3/labels", logged_in=False) == ANONYMOUS_BODY_LIMIT
    )
    assert ANONYMOUS_BODY_LIMIT < BODY_LIMIT < CREATE_BODY_LIMIT
