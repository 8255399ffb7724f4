"""The master's own log, as ``det master logs`` shows it (Determined's master log; admins only).

Determined's master is one process and keeps its log in memory. Ours runs inside Airflow's API
server, in several worker processes (``[api] workers``), so a ring in memory would show whichever
process answered. Each process instead appends its ``det_airflow.*`` records (at the level Airflow's
logging lets through, INFO and above) to a file of its own, one JSON object a line, in
``<[logging] base_log_folder>/det-master/``; a read merges the files of that folder by time. The
database is not used: its write lock is the master's busiest resource on SQLite, and the records
worth reading most are the ones logged while the database is away.

Bounds: a message is cut at ``MAX_MESSAGE`` characters; a process's file rotates at
``MAX_FILE_BYTES`` keeping one older file; a starting process removes the files of all but the
``MAX_PROCESSES`` most recently written processes; an answer holds at most ``MAX_ANSWER`` records.
On a deployment whose API servers run on several machines, each machine's answer holds the records
of the processes of that machine (or of all, if the folder is shared).

A record's text can hold what users typed (an experiment's name, a config's value): it is stored as
a JSON string, so it cannot make a record of its own, and it is only ever shown as text.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import logging.handlers
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LOGGER = "det_airflow"
FOLDER = "det-master"
MAX_MESSAGE = 8192
MAX_FILE_BYTES = 256 * 1024
MAX_PROCESSES = 16
MAX_ANSWER = 5000
LEVEL = logging.INFO

_SUFFIX = ".jsonl"
_FILE = re.compile(r"[A-Za-z0-9._-]+\.jsonl(\.1)?")
# A record whose message was cut stays under this many bytes on disk (a character is at most
# 6 bytes as a JSON escape), so a read of this much from a file's end holds every whole record.
_READ_LIMIT = MAX_FILE_BYTES + 6 * MAX_MESSAGE + 4096


def log_folder() -> Path:
    """Where this machine's API server processes keep their records."""
    from det_airflow.airflow_compat import conf

    return Path(conf.get("logging", "base_log_folder")).expanduser() / FOLDER


@dataclass(frozen=True)
class Record:
    """One record read back: ``time`` in seconds since the epoch."""

    time: float
    level: str
    logger: str
    process: str
    seq: int
    message: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "time": datetime.fromtimestamp(self.time, UTC).isoformat().replace("+00:00", "Z"),
            "level": self.level,
            "logger": self.logger,
            "process": self.process,
            "seq": self.seq,
            "message": self.message,
        }


class _ProcessFile(logging.handlers.RotatingFileHandler):
    """This process's records, one JSON object a line, in a file only its owner reads."""

    def __init__(self, path: Path, process: str) -> None:
        super().__init__(path, maxBytes=MAX_FILE_BYTES, backupCount=1, encoding="utf-8", delay=True)
        self.process = process
        self.pid = os.getpid()
        self._seq = 0
        self._text = logging.Formatter()
        self.setLevel(LEVEL)

    def _open(self) -> io.TextIOWrapper:
        # Records can name paths, hosts and users' inputs: the folder's reader is the API server's user.
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return open(fd, "a", encoding="utf-8")  # noqa: SIM115 - the handler closes it

    def emit(self, record: logging.LogRecord) -> None:
        # Under the handler's lock (Handler.handle): one number per record, in the order written.
        self._seq += 1
        record.det_seq = self._seq
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self._text.formatException(record.exc_info)
        if record.stack_info:
            message += "\n" + self._text.formatStack(record.stack_info)
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + f" ... [{len(message) - MAX_MESSAGE} characters cut]"
        return json.dumps(
            {
                "t": record.created,
                "level": record.levelname,
                "logger": record.name,
                "process": self.process,
                "seq": getattr(record, "det_seq", 0),
                "message": message,
            },
            ensure_ascii=True,
        )


_installed: _ProcessFile | None = None
_lock = threading.Lock()


def install(folder: Path | None = None) -> Path | None:
    """Keep this process's ``det_airflow`` records in ``folder`` (default: ``log_folder()``), once per
    process; answers the file, or None when the folder cannot be written (logged, not fatal)."""
    global _installed
    with _lock:
        if _installed is not None and _installed.pid == os.getpid():
            return Path(_installed.baseFilename)
        if _installed is not None:  # a forked child: the parent's file is not its own
            logging.getLogger(LOGGER).removeHandler(_installed)
            _installed = None
        folder = folder or log_folder()
        host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            _prune(folder)
            handler = _ProcessFile(folder / f"{host}-{os.getpid()}{_SUFFIX}", f"{host}:{os.getpid()}")
        except OSError as exc:  # the master serves regardless; `det master logs` then lacks this process
            logging.getLogger(__name__).warning("not keeping the master's log in %s: %s", folder, exc)
            return None
        logging.getLogger(LOGGER).addHandler(handler)
        _installed = handler
        return Path(handler.baseFilename)


def uninstall() -> None:
    """Stop keeping this process's records (the app stopped)."""
    global _installed
    with _lock:
        if _installed is not None:
            logging.getLogger(LOGGER).removeHandler(_installed)
            _installed.close()
            _installed = None


def _process_files(folder: Path) -> Iterator[Path]:
    with contextlib.suppress(OSError):
        yield from (path for path in folder.iterdir() if _FILE.fullmatch(path.name))


def _prune(folder: Path) -> None:
    """Remove the files of all but the ``MAX_PROCESSES - 1`` most recently written other processes."""
    newest: dict[str, float] = {}
    for path in _process_files(folder):
        stem = path.name.split(_SUFFIX)[0]
        with contextlib.suppress(OSError):
            newest[stem] = max(newest.get(stem, 0.0), path.stat().st_mtime)
    for stem in sorted(newest, key=newest.__getitem__, reverse=True)[MAX_PROCESSES - 1 :]:
        for name in (stem + _SUFFIX, stem + _SUFFIX + ".1"):
            (folder / name).unlink(missing_ok=True)


def _record(line: bytes) -> Record | None:
    try:
        raw = json.loads(line)
        record = Record(
            time=float(raw["t"]),
            level=str(raw["level"]),
            logger=str(raw["logger"]),
            process=str(raw["process"]),
            seq=int(raw["seq"]),
            message=str(raw["message"]),
        )
    except (ValueError, TypeError, KeyError):  # a line being written, or not one of ours
        return None
    return record


def _tail_bytes(path: Path) -> bytes:
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - _READ_LIMIT))
        return f.read(_READ_LIMIT)


def read(folder: Path, *, tail: int | None = None, since: float | None = None) -> list[Record]:
    """The records of every process of ``folder``, oldest first: those logged at or after ``since``
    (seconds since the epoch), the last ``tail`` of them, at most ``MAX_ANSWER``."""
    found: dict[tuple[str, int, float], Record] = {}
    # Times are shown to the microsecond (ISO 8601): compared so, a record's own shown time read
    # back as ``since`` keeps that record, whichever way its float was rounded.
    since_us = None if since is None else round(since * 1_000_000)
    for path in _process_files(folder):
        try:
            # A file last written before ``since`` holds nothing logged after it.
            if since is not None and path.stat().st_mtime < since - 1:
                continue
            data = _tail_bytes(path)
        except OSError:  # rotated or pruned meanwhile: its records are in the other file
            continue
        for line in data.splitlines():
            record = _record(line)
            if record is not None and (since_us is None or round(record.time * 1_000_000) >= since_us):
                # A rotation during the read can show a record in both files; the time tells apart
                # the records of a process that reused an earlier one's pid.
                found[(record.process, record.seq, record.time)] = record
    ordered = sorted(found.values(), key=lambda r: (r.time, r.process, r.seq))
    limit = MAX_ANSWER if not tail else min(tail, MAX_ANSWER)
    return ordered[-limit:]
