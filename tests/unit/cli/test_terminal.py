"""`det shell`'s terminal: bytes both ways over a WebSocket, the window size, the exit status, and the
master's refusals, against a real WebSocket server on loopback."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.server import ServerConnection, serve

from det_airflow.api.user import UserClient
from det_airflow.cli.terminal import END_OF_INPUT, TerminalClosed, run_terminal
from det_airflow.errors import APIError

TOKEN = "alice-token"
PATH = "/det/proxy/12/ws"


@dataclass
class Shell:
    """A shell's terminal as the master's proxy serves it: echoes what is typed and, at Ctrl-D, ends
    with the status its last line names (``exit N``). ``refuse`` answers the handshake instead."""

    url: str = ""
    refuse: tuple[int, str] | None = None
    greeting: bytes = b""
    hang_up: bool = False  # close without saying the exit status
    controls: list[Any] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)

    def process_request(self, connection: ServerConnection, request: Any) -> Any:
        self.requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return connection.respond(401, '{"detail": "Not authenticated"}')
        if self.refuse is not None:
            return connection.respond(self.refuse[0], json.dumps({"detail": self.refuse[1]}))
        return None

    def handle(self, connection: ServerConnection) -> None:
        if self.greeting:
            for start in range(0, len(self.greeting), 64 * 1024):
                connection.send(self.greeting[start : start + 64 * 1024])
        if self.hang_up:
            connection.close()
            return
        typed = b""
        for message in connection:
            if isinstance(message, str):
                self.controls.append(json.loads(message))
                continue
            typed += message
            if typed.endswith(END_OF_INPUT):
                connection.send(message[:-1])
                last = typed[:-1].splitlines()[-1:] or [b""]
                code = int(last[0].split()[1]) if last[0].startswith(b"exit ") else 0
                connection.send(json.dumps({"exit": code}))
                connection.close()
                return
            connection.send(message)


@pytest.fixture
def shell() -> Iterator[Shell]:
    found = Shell()
    server = serve(found.handle, "127.0.0.1", 0, process_request=found.process_request)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    found.url = f"http://127.0.0.1:{server.socket.getsockname()[1]}"
    yield found
    server.shutdown()
    thread.join(timeout=10)


def _fd(path: Path, content: bytes | None = None) -> int:
    if content is not None:
        path.write_bytes(content)
        return os.open(path, os.O_RDONLY)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


def _run(shell: Shell, tmp_path: Path, typed: bytes) -> tuple[int, bytes]:
    stdin, stdout = _fd(tmp_path / "in", typed), _fd(tmp_path / "out")
    try:
        with UserClient(shell.url, TOKEN).open_websocket(PATH) as connection:
            code = run_terminal(connection, stdin, stdout)
    finally:
        os.close(stdin)
        os.close(stdout)
    return code, (tmp_path / "out").read_bytes()


def test_from_a_pipe_bytes_go_both_ways_and_the_end_of_input_is_ctrl_d(shell: Shell, tmp_path: Path) -> None:
    code, out = _run(shell, tmp_path, b"ls -l\nexit 7\n")
    assert code == 7
    assert out == b"ls -l\nexit 7\n"
    assert shell.controls == []  # no window to tell the size of
    assert shell.requests[0].path == PATH


def test_output_larger_than_a_frame_arrives_whole(shell: Shell, tmp_path: Path) -> None:
    shell.greeting = bytes(range(256)) * 8192  # 2 MiB, in 64 KiB frames
    code, out = _run(shell, tmp_path, b"")
    assert code == 0
    assert out == shell.greeting


def test_a_connection_that_ends_without_an_exit_status_is_an_error(shell: Shell, tmp_path: Path) -> None:
    shell.hang_up = True
    with pytest.raises(TerminalClosed, match="the terminal's connection closed before its program ended"):
        _run(shell, tmp_path, b"ls\n")


@pytest.mark.parametrize(
    ("refusal", "token", "message"),
    [
        ((409, "shell 12 is not serving: it is QUEUED"), TOKEN, "shell 12 is not serving: it is QUEUED"),
        (
            (403, "user 'bob' may not open shell 12"),
            TOKEN,
            "permission denied: user 'bob' may not open shell 12",
        ),
        (None, "stale-token", "not logged in to {url} (or the session expired): run `det user login`"),
    ],
)
def test_the_masters_refusal_is_said_in_its_words(
    shell: Shell, refusal: tuple[int, str] | None, token: str, message: str
) -> None:
    shell.refuse = refusal
    with pytest.raises(APIError) as caught:
        UserClient(shell.url, token).open_websocket(PATH)
    assert str(caught.value) == message.format(url=shell.url)


def test_a_master_that_is_not_there(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(APIError, match=f"cannot open a connection to ws://127.0.0.1:{port}{PATH}"):
        UserClient(f"127.0.0.1:{port}", TOKEN).open_websocket(PATH)


def _set_size(fd: int, columns: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_on_a_terminal_keys_go_raw_the_size_follows_the_window_and_the_terminal_is_restored(
    shell: Shell, tmp_path: Path
) -> None:
    keyboard, terminal = os.openpty()
    _set_size(terminal, 100, 30)
    before = termios.tcgetattr(terminal)
    stdout = _fd(tmp_path / "out")

    def user() -> None:
        _wait_for(lambda: shell.controls)
        _set_size(terminal, 120, 40)
        os.kill(os.getpid(), signal.SIGWINCH)
        _wait_for(lambda: len(shell.controls) == 2)
        os.write(keyboard, b"\x03\rexit 4\r\x04")  # Ctrl-C is a key to send, not a signal here

    typing = threading.Thread(target=user, daemon=True)
    typing.start()
    try:
        with UserClient(shell.url, TOKEN).open_websocket(PATH) as connection:
            code = run_terminal(connection, terminal, stdout)
        typing.join(timeout=10)
        assert code == 4
        assert shell.controls == [{"resize": [100, 30]}, {"resize": [120, 40]}]
        assert (tmp_path / "out").read_bytes() == b"\x03\rexit 4\r"
        assert termios.tcgetattr(terminal) == before
    finally:
        for fd in (keyboard, terminal, stdout):
            os.close(fd)
