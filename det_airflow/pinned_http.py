"""One HTTP POST to an address checked beforehand (``webhook_address.Target``), within a deadline
for the whole exchange.

httpcore (httpx's own connection layer) is given a network backend that connects to the checked
address whatever the URL's name resolves to by then, while the Host header, the TLS server name and
the certificate check keep the name. Every read and write gets only the time left before the
deadline, so a receiver that trickles its answer cannot hold the sender longer than the deadline.
No redirect is followed, no proxy from the environment is used, and the answer's body is not read.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from det_airflow.api._http import tls_context
from det_airflow.webhook_address import Target

# What httpcore raises when no HTTP answer came (refused, reset, timed out, not HTTP, TLS failed).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    OSError,
)


def post(target: Target, body: bytes, headers: Iterable[tuple[str, str]], *, timeout: float) -> int:
    """POST ``body`` to ``target``'s address; answers the HTTP status. Raises one of
    TRANSPORT_ERRORS when no answer came within ``timeout`` seconds from now."""
    deadline = time.monotonic() + timeout
    url = httpcore.URL(
        scheme=target.scheme.encode(),
        host=target.host.encode(),
        port=target.port,
        target=target.target.encode(),
    )
    sent = [("Host", target.host_header), *headers]
    limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    context = tls_context() if target.scheme == "https" else None  # one per process: reading CAs is slow
    with httpcore.ConnectionPool(
        ssl_context=context, network_backend=_PinnedBackend(target.address, deadline)
    ) as pool:
        with pool.stream("POST", url, headers=sent, content=body, extensions={"timeout": limits}) as answer:
            return int(answer.status)


def _left(deadline: float, timeout: float | None) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the deadline passed")
    return left if timeout is None else min(timeout, left)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to one address, whatever host the URL names."""

    def __init__(self, address: str, deadline: float) -> None:
        self._address = address
        self._deadline = deadline
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            self._address, port, _left(self._deadline, timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks are sent over TCP only")


class _DeadlineStream(httpcore.NetworkStream):
    """A stream whose every operation ends by the deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(self._deadline, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(self._deadline, timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        secure = self._stream.start_tls(ssl_context, server_hostname, _left(self._deadline, timeout))
        return _DeadlineStream(secure, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)
