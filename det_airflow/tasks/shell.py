"""A shell task: terminals over WebSocket. ``python3 -m det_airflow.tasks.shell``.

The server listens at ``<proxy_prefix>ws`` (for example ``/det/proxy/12/ws``); any other path is
404, and a handshake without the proxy's ``X-Det-Task-Secret`` header is refused with 403. Each
connection gets a terminal of its own: a new PTY running the task's ``args.command`` (an argv) or,
when that is empty, the user's shell (``$SHELL``, else ``/bin/bash``, else ``/bin/sh``), in the
working directory, with this process's environment (without the trial token). A connection may
name its own command in the query, ``?command=ls&command=-l`` (``det shell open ID -- CMD``).

The protocol on a connection:

- binary frames, both ways: the terminal's bytes (keys typed in, output shown);
- a text frame ``{"resize": [cols, rows]}`` from the client: the terminal's new size;
- a text frame ``{"exit": code}`` from the server when the process ends (``128 + n`` for one
  killed by signal ``n``, as shells report it), then the server closes the connection.

A connection that closes first hangs up its terminal. With an idle timeout, the program exits 0
once no connection has been open for that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import pty
import shutil
import signal
import struct
import termios
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from det_airflow.tasks import SECRET_HEADER
from det_airflow.tasks._server import (
    IdleClock,
    Task,
    TaskError,
    check_bindable,
    check_interval,
    connect,
    logger,
    new_secret,
    report_ready,
    run,
    secret_matches,
)

if TYPE_CHECKING:
    from websockets.asyncio.server import ServerConnection
    from websockets.http11 import Request, Response

PATH = "ws"
# After its process ended, how long a terminal's last output may take to arrive; a background
# process that keeps the terminal open would otherwise hold the connection forever.
DRAIN_SECONDS = 1.0
# After a hang-up, how long a process has to end before it is killed.
HANGUP_SECONDS = 5.0


def command_of(task: Task) -> list[str]:
    """What each terminal runs: the task's command, else the user's shell."""
    command = task.args.get("command") or []
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise TaskError(
            f"the master's task answer: args.command: expected a list of strings, got {command!r}"
        )
    if command:
        return list(command)
    shell = os.environ.get("SHELL")
    if shell and shutil.which(shell):
        return [shell]
    return ["/bin/bash"] if os.path.exists("/bin/bash") else ["/bin/sh"]


def exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Terminal:
    """A process on a new PTY, read and written without blocking the event loop."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes argv, or says why not
            try:
                os.execvpe(argv[0], argv, env)
            except OSError as exc:
                os.write(2, f"{argv[0]}: {exc.strerror}\r\n".encode())
            os._exit(127)
        self.pid, self.fd = pid, fd
        os.set_blocking(fd, False)
        self._status: int | None = None

    async def _when(self, add: Callable[..., None], remove: Callable[[int], Any], fd: int) -> None:
        """Wait until ``fd`` is readable (``add`` = loop.add_reader) or writable (add_writer)."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        add(fd, wake)
        try:
            await ready
        finally:
            remove(fd)

    async def read(self) -> bytes:
        """The next output; b"" once nothing can write to the terminal any more."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                return os.read(self.fd, 65536)
            except BlockingIOError:
                await self._when(loop.add_reader, loop.remove_reader, self.fd)
            except OSError as exc:
                if exc.errno == errno.EIO:  # Linux's answer once the last writer closed it
                    return b""
                raise

    async def write(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await self._when(loop.add_writer, loop.remove_writer, self.fd)

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def wait(self) -> int:
        """The process's exit code, once it ended."""
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(self.pid) if hasattr(os, "pidfd_open") else None
        try:
            while self._status is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self._status = status
                elif pidfd is not None:
                    await self._when(loop.add_reader, loop.remove_reader, pidfd)
                else:
                    await asyncio.sleep(0.1)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return exit_code(self._status)

    async def hang_up(self) -> None:
        """Close the terminal (its processes get SIGHUP) and reap the process; killed if it lingers."""
        os.close(self.fd)
        if self._status is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGHUP)
        try:
            await asyncio.wait_for(self.wait(), HANGUP_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            await self.wait()


class ShellServer:
    """The WebSocket server: the secret checked at the handshake, one Terminal per connection."""

    def __init__(self, task: Task, secret: str, argv: list[str]) -> None:
        self.task, self.secret, self.argv = task, secret, argv
        self.clock = IdleClock()
        self.env = dict(os.environ)
        # The browser's terminal (xterm.js) speaks xterm.
        self.env.setdefault("TERM", "xterm-256color")

    def check(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path.split("?", 1)[0] != self.task.proxy_prefix + PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, f"no such path; terminals are at {PATH}\n")
        if not secret_matches(request.headers.get(SECRET_HEADER), self.secret):
            return connection.respond(HTTPStatus.FORBIDDEN, f"missing or wrong {SECRET_HEADER} header\n")
        return None

    async def handle(self, connection: ServerConnection) -> None:
        self.clock.opened()
        try:
            await self._session(connection)
        finally:
            self.clock.closed()

    def argv_of(self, connection: ServerConnection) -> list[str]:
        """The connection's own command (``?command=...``, repeated per argument), else the task's."""
        from urllib.parse import parse_qs, urlsplit

        request = connection.request
        asked = parse_qs(urlsplit(request.path).query).get("command") if request is not None else None
        return list(asked) if asked else self.argv

    async def _session(self, connection: ServerConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        terminal = Terminal(self.argv_of(connection), self.env)
        output = asyncio.create_task(self._output(terminal, connection))
        inputs = asyncio.create_task(self._input(terminal, connection))
        ended = asyncio.create_task(terminal.wait())
        try:
            await asyncio.wait({ended, inputs}, return_when=asyncio.FIRST_COMPLETED)
            if ended.done():
                with contextlib.suppress(TimeoutError, ConnectionClosed):
                    await asyncio.wait_for(asyncio.shield(output), DRAIN_SECONDS)
                with contextlib.suppress(ConnectionClosed):
                    await connection.send(json.dumps({"exit": ended.result()}))
                    await connection.close()
        finally:
            for task in (output, inputs, ended):
                task.cancel()
            await asyncio.gather(output, inputs, ended, return_exceptions=True)
            await terminal.hang_up()

    @staticmethod
    async def _output(terminal: Terminal, connection: ServerConnection) -> None:
        while data := await terminal.read():
            await connection.send(data)

    @staticmethod
    async def _input(terminal: Terminal, connection: ServerConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):
            async for message in connection:
                if isinstance(message, bytes):
                    await terminal.write(message)
                    continue
                size = _resize(message)
                if size is None:
                    logger.warning('ignored a text frame that is not {"resize": [cols, rows]}')
                else:
                    terminal.resize(*size)

    async def serve(self, client: Any) -> None:
        """Serve until stopped (SIGTERM) or idle; tells the master where once listening."""
        from websockets.asyncio.server import serve

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with serve(self.handle, self.task.bind_address, 0, process_request=self.check) as server:
            port = server.sockets[0].getsockname()[1]
            # In a thread: the master may try the server before it answers.
            await asyncio.to_thread(report_ready, client, self.task, port, self.secret)
            logger.info("The shell is ready at %s%s", self.task.proxy_prefix, PATH)
            self.clock.touch()
            idle = self.task.idle_timeout
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), check_interval(idle) if idle else None)
                if idle is not None and self.clock.idle_seconds() >= idle:
                    logger.info("no terminal open for %g s: the shell stops", idle)
                    break


def _resize(message: str) -> tuple[int, int] | None:
    try:
        size = json.loads(message).get("resize")
    except (ValueError, AttributeError):
        return None
    if (
        isinstance(size, list)
        and len(size) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and 0 < n < 65536 for n in size)
    ):
        return size[0], size[1]
    return None


def main() -> int:
    client, task = connect("shell")
    argv = command_of(task)
    check_bindable(task.bind_address)
    server = ShellServer(task, new_secret(), argv)
    asyncio.run(server.serve(client))
    return 0


if __name__ == "__main__":
    run("shell", main)
