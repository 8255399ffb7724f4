"""Object collectives over plain TCP: a star of one root and its peers, without torch.

What ``DistributedContext(rank=..., size=..., chief_ip=...)`` uses when torch.distributed is not
set up (the Core API tutorial's own launcher). Every message is a pickled object behind an 8-byte
length; collectives are called by every member in the same order, so each connection carries one
ordered stream and needs no tags. Only the trial's own workers should reach the port: the root
listens on the address its peers dial, not on every interface.
"""

from __future__ import annotations

import pickle
import socket
import struct
import time
from typing import Any

from det_airflow.errors import DetError

_HEADER = struct.Struct("!Q")
CONNECT_TIMEOUT_SECONDS = 300.0


class Star:
    """One root (member 0) connected to ``size - 1`` peers; ``member`` is this process's index."""

    def __init__(
        self, member: int, size: int, host: str, port: int, *, server: socket.socket | None = None
    ) -> None:
        """The root listens on ``host:port`` (or uses ``server``, already listening) and waits for
        every peer; a peer dials it, retrying until the root is up."""
        self.member = member
        self.size = size
        self._peers: list[socket.socket] = []  # the root's, in member order
        self._root: socket.socket | None = None
        self._server: socket.socket | None = None
        if member == 0:
            self._server = server or listen(host, port)
            self.port = self._server.getsockname()[1]
            self._accept(size - 1)
        else:
            self.port = port
            self._root = _connect(host, port)
            _send(self._root, member)

    def _accept(self, count: int) -> None:
        assert self._server is not None
        by_member: dict[int, socket.socket] = {}
        self._server.settimeout(CONNECT_TIMEOUT_SECONDS)
        while len(by_member) < count:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                raise DetError(
                    f"distributed: {count - len(by_member)} of {count} workers did not connect to "
                    f"the chief within {CONNECT_TIMEOUT_SECONDS:.0f}s"
                ) from None
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            member = _recv(conn)
            if not isinstance(member, int) or not 0 < member < self.size or member in by_member:
                conn.close()
                continue
            by_member[member] = conn
        self._peers = [by_member[m] for m in range(1, self.size)]
        self._server.close()
        self._server = None

    def gather(self, stuff: Any) -> list[Any] | None:
        if self._root is not None:
            _send(self._root, stuff)
            _recv(self._root)  # the root's go-ahead: no send of a later collective overtakes this one
            return None
        out = [stuff, *(_recv(peer) for peer in self._peers)]
        for peer in self._peers:
            _send(peer, None)
        return out

    def allgather(self, stuff: Any) -> list[Any]:
        if self._root is not None:
            _send(self._root, stuff)
            return list(_recv(self._root))
        out = [stuff, *(_recv(peer) for peer in self._peers)]
        for peer in self._peers:
            _send(peer, out)
        return out

    def broadcast(self, stuff: Any) -> Any:
        if self._root is not None:
            return _recv(self._root)
        for peer in self._peers:
            _send(peer, stuff)
        return stuff

    def close(self) -> None:
        for sock in (*self._peers, self._root, self._server):
            if sock is not None:
                sock.close()
        self._peers, self._root, self._server = [], None, None


def listen(host: str, port: int) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, port))
    except OSError:
        try:  # an address the peers reach but this host does not hold (NAT, a DNS alias)
            server.bind(("", port))
        except OSError as exc:
            server.close()
            raise DetError(f"distributed: the chief cannot listen on port {port} ({exc.strerror})") from None
    server.listen()
    return server


def _connect(host: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=10.0)
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise DetError(
                    f"distributed: cannot reach the chief at {host}:{port} ({exc}); "
                    "is chief_ip right and the chief started?"
                ) from None
            time.sleep(0.2)
            continue
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    (length,) = _HEADER.unpack(_read(sock, _HEADER.size))
    return pickle.loads(_read(sock, length))


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise DetError("distributed: a worker's connection closed mid-collective (did it exit?)")
        got += k
    return bytes(buf)
