"""Which API server process runs the master's periodic background jobs: one of the deployment at a time.

Airflow's API server runs several worker processes (``[api] workers``), on one machine or several,
and each serves the master app. The housekeeping jobs (housekeeping.JOBS) write det's and Airflow's
tables, so their periodic turns are run by one process at a time: the holder of a lock that is let go
when its holder dies.

- PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) on a connection kept for it: one
  holder in the whole deployment, whichever machine; a holder whose connection broke (the server
  restarted) holds nothing and tries again like the others.
- SQLite, which lives on one machine: an ``flock`` on a file beside the database.
- Any other database, or SQLite in memory: every process leads, as if there were one.

A job a request asks for (``housekeeping.run_soon``) still runs in the process of that request: the
change it follows was made there, and every job is safe to run from two processes at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from typing import Protocol

from sqlalchemy import Connection, Engine, text

log = logging.getLogger(__name__)

#: The advisory lock's key: "det-" as a number, so that it is told apart from other users' locks.
ADVISORY_KEY = 0x6465742D
#: The file beside a SQLite database that its leader holds.
LOCK_SUFFIX = ".det-housekeeping.lock"


class Leadership(Protocol):
    def holds(self) -> bool:
        """Whether this process leads now: takes the lead when nobody holds it."""
        ...

    def release(self) -> None:
        """Let another process lead (this one stops or no longer runs the jobs)."""
        ...


def of(engine: Engine) -> Leadership:
    """The leadership over the database behind ``engine``."""
    url = engine.url
    if url.get_backend_name() == "postgresql":
        return AdvisoryLock(engine)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return FileLock(f"{url.database}{LOCK_SUFFIX}")
    return Always()


class Always:
    """Every process leads."""

    def holds(self) -> bool:
        return True

    def release(self) -> None:
        pass


class FileLock:
    """An exclusive ``flock`` on ``path``, kept while the process runs (its death lets it go)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._unlockable = False  # the file cannot be made: this process leads, said once

    def holds(self) -> bool:
        if self._fd is not None or self._unlockable:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # the database's folder is not writable: lead, as before
            log.warning(
                "cannot open %s (%s): this process runs the background jobs regardless", self.path, exc
            )
            self._unlockable = True
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with the file description
            self._fd = None


class AdvisoryLock:
    """PostgreSQL's session advisory lock, on a connection of its own kept while it is held."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Connection | None = None

    def holds(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return True
            except Exception:  # noqa: BLE001 - the connection broke: so did the lock
                log.warning("lost the connection that held the background jobs' lock; taking it again")
                self._drop()
        try:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except Exception as exc:  # noqa: BLE001 - the database is away: nobody writes then
            log.warning("cannot reach the database to lead the background jobs: %s", exc)
            return False
        try:
            taken = bool(
                conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_KEY}).scalar()
            )
        except Exception:  # noqa: BLE001
            conn.invalidate()
            conn.close()
            return False
        if not taken:
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        if self._conn is None:
            return
        with contextlib.suppress(Exception):
            self._conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()  # never back to the pool while it might still hold the lock
                conn.close()
