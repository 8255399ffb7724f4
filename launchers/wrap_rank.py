"""``python3 -m det_airflow.launchers.wrap_rank RANK [--] SCRIPT...``: run SCRIPT with every line it
prints prefixed ``[rank=N] ``, so that a trial's logs can be filtered by rank.

RANK is a number, or names of environment variables to read it from, the first one set winning
(``RANK``, ``HOROVOD_RANK,OMPI_COMM_WORLD_RANK``). Lines of stdout and stderr both end at ``\\n`` or
``\\r`` (progress bars), and go to this process's stdout and stderr a whole line per write, so the
lines of ranks sharing a pipe do not mix (a write of up to 4 KiB to a pipe is atomic). The exit
status is SCRIPT's (128 + N when a signal N killed it).
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from det_airflow.launchers._supervisor import Supervisor

USAGE = "usage: python3 -m det_airflow.launchers.wrap_rank RANK [--] SCRIPT..."
_READ_SIZE = 65536
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_MAX_LINE = 65536  # a longer "line" is passed on in pieces
_QUIET = 0.2  # seconds without output after which a partial line is passed on


class LinePrefixer:
    """Prefixes every line of a byte stream that arrives in arbitrary chunks.

    Whole lines come out of :meth:`feed` one by one, so each can be written in one ``write`` and
    the lines of several ranks sharing one pipe never mix. A partial line is held until its end
    arrives, or until :meth:`flush` (the pump calls it when the script goes quiet, e.g. after a
    prompt); what follows a flushed partial line continues it, without a second prefix.
    """

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self._pending = b""
        self._mid_line = False  # the last output ended inside a line
        self._after_cr = False  # the last output ended with \r: a \n next completes its \r\n

    def feed(self, data: bytes) -> list[bytes]:
        out = []
        if self._after_cr and data.startswith(b"\n"):
            out.append(b"\n")
            data = data[1:]
        self._after_cr = False
        data, self._pending = self._pending + data, b""
        start = 0
        for match in _LINE_BREAK.finditer(data):
            if match.group() == b"\r" and match.end() == len(data):
                break  # perhaps the first half of a \r\n: wait for what comes next
            out.append(self._line_start() + data[start : match.end()])
            start = match.end()
        self._pending = data[start:]
        if len(self._pending) >= _MAX_LINE:
            out.append(self.flush())
        return out

    def flush(self) -> bytes:
        """The partial line held so far (empty when none)."""
        if not self._pending:
            return b""
        text = self._line_start() + self._pending
        self._after_cr = self._pending.endswith(b"\r")
        self._mid_line = not self._after_cr
        self._pending = b""
        return text

    def _line_start(self) -> bytes:
        prefix = b"" if self._mid_line else self.prefix
        self._mid_line = False
        return prefix


def resolve_rank(spec: str, env: Mapping[str, str]) -> int:
    """The rank a RANK argument names: the number itself, or the first of its variables that is set."""
    if spec.isdigit():
        return int(spec)
    names = [name.strip() for name in spec.split(",") if name.strip()]
    for name in names:
        value = env.get(name, "").strip()
        if value:
            if not value.isdigit():
                raise ValueError(f"wrap_rank: {name}={value!r} is not a rank")
            return int(value)
    shown = ", ".join(names) if names else repr(spec)
    raise ValueError(f"wrap_rank: none of {shown} is set in the environment")


def pump(source: int, target: int, prefixer: LinePrefixer) -> None:
    """Copy ``source`` to ``target`` (file descriptors) through ``prefixer``, until end of file."""
    writable = True

    def write(pieces: list[bytes]) -> None:
        nonlocal writable
        for piece in pieces:
            if writable and piece:
                try:
                    _write_all(target, piece)
                except OSError:  # nobody reads us any more: keep draining so the script never blocks
                    writable = False

    while True:
        ready, _, _ = select.select([source], [], [], _QUIET)
        if not ready:
            write([prefixer.flush()])
            continue
        try:
            chunk = os.read(source, _READ_SIZE)
        except OSError:
            chunk = b""
        if not chunk:
            write([prefixer.flush()])
            return
        write(prefixer.feed(chunk))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[1] == "--":
        args = [args[0], *args[2:]]
    if len(args) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        rank = resolve_rank(args[0], os.environ)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    prefix = f"[rank={rank}] ".encode()
    script = args[1:]
    with Supervisor(watch_parent=True) as supervisor:
        try:
            proc = supervisor.start(script, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            print(
                f"[rank={rank}] wrap_rank: cannot run {script[0]!r}: {exc.strerror or exc}", file=sys.stderr
            )
            return 127
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [
            threading.Thread(target=pump, args=(proc.stdout.fileno(), 1, LinePrefixer(prefix)), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr.fileno(), 2, LinePrefixer(prefix)), daemon=True),
        ]
        for thread in pumps:
            thread.start()
        status = supervisor.wait()
    for thread in pumps:
        # Whatever the script left running may hold the pipes open: do not wait for it forever.
        thread.join(timeout=5.0)
    return status


if __name__ == "__main__":
    sys.exit(main())
