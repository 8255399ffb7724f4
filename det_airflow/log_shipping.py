"""Ships output lines to the master in batches, from a background thread.

Used by the trial operators (the service token, for any trial's output) and by unmanaged runs
(``core_v2``: the program's own stdout and stderr, with its trial token). Imports nothing of
Airflow: a program started outside any trial uses it too.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from det_airflow.errors import APIError

_RANK = re.compile(r"^\[rank=(\d+)\] ")
_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s*|\s+)")
# A batch stays well under the master's body limit and LogBatch's 10,000 lines.
_BATCH_LINES = 5000


def parse_line(line: str, stream: str) -> dict[str, Any]:
    """One output line → a log record: `[rank=N] ` prefix (from wrap_rank) and a leading level."""
    rank = None
    message = line
    match = _RANK.match(message)
    if match:
        rank, message = int(match.group(1)), message[match.end() :]
    level = "INFO"
    level_match = _LEVEL.match(message)
    if level_match:  # `INFO: text` (Python's logging): the level becomes the record's, once
        level = "WARNING" if level_match.group(1) == "WARN" else level_match.group(1)
        message = message[level_match.end() :]
    return {
        "timestamp": datetime.now(UTC).isoformat(),
        "rank": rank,
        "level": level,
        "stdtype": stream,
        "message": message,
    }


class Tee:
    """A text stream that writes through to `stream` and hands each complete line to `shipper`."""

    def __init__(self, stream: Any, name: str, shipper: LogShipper, *, rank: int | None = None) -> None:
        self.stream = stream
        self._name = name
        self._shipper = shipper
        self._rank = rank
        self._partial = ""

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._shipper.add(line, self._name, rank=self._rank)
        return int(written) if written is not None else len(text)

    def flush(self) -> None:
        self.stream.flush()

    def end(self) -> Any:
        """Hand over a last unterminated line; answers the stream to put back."""
        if self._partial:
            self._shipper.add(self._partial, self._name, rank=self._rank)
            self._partial = ""
        return self.stream

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, isatty...: the real stream's
        return getattr(self.stream, name)


class LogShipper:
    """Buffers lines and hands them to `ship` every `interval` seconds (and at close).

    Logs are best effort: a batch `ship` fails to send is reported to `warn` and dropped, never
    raised into the program whose output it is.
    """

    def __init__(
        self,
        ship: Callable[[list[dict[str, Any]]], None],
        *,
        name: str = "det-logs",
        interval: float = 1.0,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.interval = interval
        self.container_id = socket.gethostname()[:12]
        self._ship = ship
        self._warn = warn
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def add(self, line: str, stream: str, *, rank: int | None = None) -> None:
        record = parse_line(line, stream)
        record["container_id"] = self.container_id
        if rank is not None and record["rank"] is None:
            record["rank"] = rank
        with self._lock:
            self._buffer.append(record)

    def _flush(self) -> None:
        with self._lock:
            batch, self._buffer = self._buffer, []
        for start in range(0, len(batch), _BATCH_LINES):
            part = batch[start : start + _BATCH_LINES]
            try:
                self._ship(part)
            except APIError as exc:
                if self._warn is not None:
                    self._warn(f"could not store {len(part)} log lines in the master: {exc}")

    def _loop(self) -> None:
        while not self._closed.wait(self.interval):
            self._flush()

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self._flush()
