"""Ships a trial's output lines to the master in batches, from a background thread."""

from __future__ import annotations

import re
import socket
import threading
from datetime import UTC, datetime
from typing import Any

from det_airflow.api.internal import InternalClient
from det_airflow.errors import APIError

_RANK = re.compile(r"^\[rank=(\d+)\] ")
_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s*|\s+)")


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


class LogShipper:
    """Buffers lines and posts them every `interval` seconds (and at close)."""

    def __init__(
        self, client: InternalClient, trial_id: int, *, interval: float = 1.0, log: Any = None
    ) -> None:
        self.client = client
        self.trial_id = trial_id
        self.interval = interval
        self.container_id = socket.gethostname()[:12]
        self._log = log
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"det-logs-{trial_id}", daemon=True)
        self._thread.start()

    def add(self, line: str, stream: str) -> None:
        record = parse_line(line, stream)
        record["container_id"] = self.container_id
        with self._lock:
            self._buffer.append(record)

    def _flush(self) -> None:
        with self._lock:
            batch, self._buffer = self._buffer, []
        for start in range(0, len(batch), 5000):
            try:
                self.client.ship_logs(self.trial_id, batch[start : start + 5000])
            except APIError as exc:  # logs are best effort; the task log still has every line
                if self._log is not None:
                    self._log.warning("could not store %d log lines in the master: %s", len(batch), exc)

    def _loop(self) -> None:
        while not self._closed.wait(self.interval):
            self._flush()

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self._flush()
