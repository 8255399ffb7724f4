"""``python3 -m det_airflow.launchers.wrap_rank RANK [--] SCRIPT...``: run SCRIPT with every line it
prints prefixed ``[rank=N] ``, so that a trial's logs can be filtered by rank.

RANK is a number, or names of environment variables to read it from, the first one set winning
(``RANK``, ``HOROVOD_RANK,OMPI_COMM_WORLD_RANK``). Lines of stdout and stderr both end at ``\\n`` or
``\\r`` (progress bars), and go to this process's stdout and stderr as they come, partial lines
included. The exit status is SCRIPT's (128 + N when a signal N killed it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from det_airflow.launchers._supervisor import Supervisor

USAGE = "usage: python3 -m det_airflow.launchers.wrap_rank RANK [--] SCRIPT..."
_READ_SIZE = 65536
_SEGMENT = re.compile(rb"([^\r\n]*)(\r\n|\r|\n)?")


class LinePrefixer:
    """Prefixes every line of a byte stream, fed in arbitrary chunks, without holding text back."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self._at_line_start = True
        self._after_cr = False

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        start = 0
        if self._after_cr and data.startswith(b"\n"):  # the second half of a \r\n split across reads
            out += b"\n"
            start = 1
        for match in _SEGMENT.finditer(data, start):
            text, brk = match.group(1), match.group(2)
            if not text and not brk:
                continue
            if self._at_line_start:
                out += self.prefix
            out += text
            if brk:
                out += brk
            self._at_line_start = bool(brk)
        if data:
            self._after_cr = data.endswith(b"\r")
        return bytes(out)


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
    while True:
        try:
            chunk = os.read(source, _READ_SIZE)
        except OSError:
            break
        if not chunk:
            break
        if writable:
            try:
                _write_all(target, prefixer.feed(chunk))
            except OSError:  # nobody reads us any more: keep draining so the script never blocks
                writable = False


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
