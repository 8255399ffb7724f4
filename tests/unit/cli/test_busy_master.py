"""A 429 the master answers with Retry-After (a cap on work that ends by itself, such as a user's
creates in flight) is waited out and the same request sent again; one without it is the answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from det_airflow.api._http import Session
from det_airflow.errors import APIError


class _Busy(BaseHTTPRequestHandler):
    """Answers 429 to the first ``busy`` requests, then 200 with the body it was sent."""

    busy = 0
    retry_after: str | None = "0.05"
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append(body)
        if len(self.bodies) <= self.busy:
            self.send_response(429)
            if self.retry_after is not None:
                self.send_header("Retry-After", self.retry_after)
            payload = b'{"detail": "user \'alice\' already has 4 experiment creates in flight"}'
        else:
            self.send_response(200)
            payload = body
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def master() -> Iterator[type[_Busy]]:
    handler = type("Handler", (_Busy,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.address = f"127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_429_with_retry_after_is_waited_out_and_the_same_request_sent_again(master: type[_Busy]) -> None:
    master.busy = 3
    with Session(master.address) as session:  # type: ignore[attr-defined]
        answer = session.post("/experiments", json={"config": "name: x", "request_id": "r1"})
    assert answer == {"config": "name: x", "request_id": "r1"}
    assert len(master.bodies) == 4
    assert len(set(master.bodies)) == 1, "each try sends the same body"


def test_a_429_without_retry_after_is_the_answer(master: type[_Busy]) -> None:
    master.busy, master.retry_after = 3, None
    with Session(master.address) as session, pytest.raises(APIError) as refused:  # type: ignore[attr-defined]
        session.post("/experiments", json={"config": "name: x"})
    assert refused.value.status_code == 429
    assert "already has 4 experiment creates in flight" in str(refused.value)
    assert len(master.bodies) == 1
