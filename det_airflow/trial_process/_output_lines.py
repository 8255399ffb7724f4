"""A trial's output as lines: bytes from a pipe, a container or a pod, split where a terminal would.

``\\r\\n``, ``\\r`` and ``\\n`` all end a line, so that a progress bar redrawn with ``\\r`` shows as
its successive states; the empty segments such redraws leave are skipped.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Callable
from typing import IO

OnOutput = Callable[[str, str], None]
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_READ_SIZE = 65536
# A "line" longer than this (no line break in sight) from a local process is passed on in pieces.
MAX_LINE = 1024 * 1024


class LineSplitter:
    """Turns chunks of bytes into lines of one ``stream``, passed to ``emit(line, stream)``.

    With ``max_line``, text that runs longer without a line break is passed on in pieces of that
    many characters.
    """

    def __init__(self, stream: str, emit: OnOutput, *, max_line: int | None = None) -> None:
        self.stream = stream
        self._emit = emit
        self._max_line = max_line
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, chunk: bytes) -> None:
        self._split(self._decoder.decode(chunk), final=False)

    def close(self) -> None:
        """Pass on what is left: the last line, which no line break ended."""
        self._split(self._decoder.decode(b"", final=True), final=True)
        if self._pending:
            self._emit(self._pending, self.stream)
        self._pending = ""

    def _split(self, text: str, *, final: bool) -> None:
        pending = self._pending + text
        # A trailing \r may be the first half of \r\n: keep it until more arrives.
        cut = len(pending) - 1 if pending.endswith("\r") and not final else len(pending)
        parts = _LINE_BREAK.split(pending[:cut])
        breaks = _LINE_BREAK.findall(pending[:cut])
        for line, brk in zip(parts, breaks, strict=False):
            if line or brk != "\r":
                self._emit(line, self.stream)
        pending = parts[-1] + pending[cut:]
        while self._max_line is not None and len(pending) > self._max_line:
            self._emit(pending[: self._max_line], self.stream)
            pending = pending[self._max_line :]
        self._pending = pending


def pump_lines(pipe: IO[bytes], stream: str, emit: OnOutput) -> None:
    """Read ``pipe`` as it fills until its end, passing on its lines; then close it."""
    lines = LineSplitter(stream, emit, max_line=MAX_LINE)
    fd = pipe.fileno()
    while chunk := os.read(fd, _READ_SIZE):
        lines.feed(chunk)
    lines.close()
    pipe.close()
