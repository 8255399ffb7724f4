"""A terminal over a WebSocket: this program's terminal, or its stdin and stdout, joined to a shell
task's terminal through the master's proxy.

The protocol: binary frames carry terminal bytes both ways; the client says its size in a text
frame ``{"resize": [cols, rows]}`` when it connects and whenever its window changes (SIGWINCH);
the server says ``{"exit": code}`` when the program behind the terminal ends, then closes.

On a terminal, keys go as typed (raw mode, restored on the way out). From a pipe, the bytes go as
they come and the end of the input is sent as the terminal's end-of-file character (Ctrl-D), as if
typed: a shell reading it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from det_airflow.errors import DetError

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

END_OF_INPUT = b"\x04"
_READ_SIZE = 64 * 1024
# What wakes the loop that sends input: the window changed, the connection ended.
_RESIZED, _CLOSED = b"r", b"c"


class TerminalClosed(DetError):
    """The connection ended before the program behind the terminal did."""


def run_terminal(
    connection: ClientConnection, stdin_fd: int | None = None, stdout_fd: int | None = None
) -> int:
    """Joins ``stdin_fd`` and ``stdout_fd`` (default: this program's) to the terminal at the other
    end of ``connection`` until its program ends; answers that program's exit status.

    Raises:
        TerminalClosed: The connection closed without an exit status.
    """
    stdin_fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    stdout_fd = sys.stdout.fileno() if stdout_fd is None else stdout_fd
    interactive = os.isatty(stdin_fd)
    with _raw_mode(stdin_fd) if interactive else contextlib.nullcontext():
        code = _Bridge(connection, stdin_fd, stdout_fd, size_fd=stdin_fd if interactive else None).run()
    if code is None:
        raise TerminalClosed("the terminal's connection closed before its program ended")
    return code


@contextlib.contextmanager
def _raw_mode(fd: int) -> Iterator[None]:
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class _Bridge:
    """Input goes out from the calling thread (which also handles SIGWINCH); output comes in on a
    thread of its own. A pipe wakes the input loop when the window changes or the output ends."""

    def __init__(
        self, connection: ClientConnection, stdin_fd: int, stdout_fd: int, size_fd: int | None
    ) -> None:
        self.connection = connection
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.size_fd = size_fd
        self.exit_code: int | None = None
        self.wake_read, self.wake_write = os.pipe()

    def run(self) -> int | None:
        receiver = threading.Thread(target=self._receive, name="terminal-output", daemon=True)
        previous: Any = None
        try:
            if self.size_fd is not None:
                previous = signal.signal(signal.SIGWINCH, lambda *_: self._wake(_RESIZED))
                self._send_size()
            receiver.start()
            self._send_input()
        finally:
            if self.size_fd is not None and previous is not None:
                signal.signal(signal.SIGWINCH, previous)
            self.connection.close()
            if receiver.is_alive():
                receiver.join()
            os.close(self.wake_read)
            os.close(self.wake_write)
        return self.exit_code

    def _wake(self, why: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_write, why)

    def _send_size(self) -> None:
        assert self.size_fd is not None
        try:
            size = os.get_terminal_size(self.size_fd)
        except OSError:
            return
        self.connection.send(json.dumps({"resize": [size.columns, size.lines]}))

    def _send_input(self) -> None:
        from websockets.exceptions import ConnectionClosed

        watched = [self.wake_read, self.stdin_fd]
        try:
            while True:
                ready, _, _ = select.select(watched, [], [])
                if self.wake_read in ready:
                    why = os.read(self.wake_read, 64)
                    if _CLOSED in why:
                        return
                    if _RESIZED in why:
                        self._send_size()
                if self.stdin_fd in ready:
                    data = os.read(self.stdin_fd, _READ_SIZE)
                    if not data:
                        watched.remove(self.stdin_fd)
                        data = END_OF_INPUT
                    self.connection.send(data)
        except ConnectionClosed:
            return

    def _receive(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for message in self.connection:
                if isinstance(message, bytes):
                    _write_all(self.stdout_fd, message)
                else:
                    self._control(message)
        except (ConnectionClosed, OSError):
            pass
        finally:
            self._wake(_CLOSED)

    def _control(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        code = message.get("exit") if isinstance(message, dict) else None
        if isinstance(code, int) and not isinstance(code, bool):
            self.exit_code = code


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
