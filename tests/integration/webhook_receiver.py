"""An HTTP receiver of webhook POSTs on loopback, for the tests that watch the master deliver them:
it keeps each POST's headers and body, answers 200, and can be started after its port is chosen, so
a test can hold it down while events are due."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Post:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    def signed_with(self, signing_key: str) -> bool:
        """Whether the POST carries Determined's signature under ``signing_key`` (docs/webhooks.md)."""
        timestamp = self.headers.get("X-Determined-AI-Signature-Timestamp", "")
        expected = hmac.new(signing_key.encode(), f"{timestamp},".encode() + self.body, hashlib.sha256)
        return hmac.compare_digest(self.headers.get("X-Determined-AI-Signature", ""), expected.hexdigest())


@dataclass
class Receiver:
    port: int
    posts: list[Post] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        posts, lock = self.posts, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    posts.append(Post(dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
