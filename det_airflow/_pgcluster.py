"""A PostgreSQL server of this machine's own, in one folder, listening on 127.0.0.1 only.

The local Airflow's metadata database in Celery mode (``localairflow init --executor celery``) and
the integration tests' throwaway database. Debian's server binaries (``/usr/lib/postgresql/N/bin``)
run the cluster; as root they run as the ``postgres`` user, since PostgreSQL refuses root.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from det_airflow.errors import DetError

#: The database created for Airflow in every cluster.
DATABASE = "airflow"
#: A throwaway cluster trades durability for speed: its data is gone after the run anyway.
#: The server's ``max_connections``: room for each component's pool at its fullest.
MAX_CONNECTIONS = 300
_NOT_DURABLE = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


class PgClusterError(DetError):
    """A PostgreSQL command of the cluster failed."""


def find_bindir() -> Path | None:
    """The newest PostgreSQL server binaries (Debian keeps them in /usr/lib/postgresql/N/bin), or
    the folder of an ``initdb`` on PATH; None when there are none."""
    found = sorted(
        (p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    if initdb := shutil.which("initdb"):
        return Path(initdb).parent
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """A PostgreSQL cluster in ``base`` (data in ``base/data``, log ``base/postgres.log``, socket in
    ``base``), on 127.0.0.1:``port``, user ``postgres`` with ``password``.

    A ``throwaway`` cluster runs without durability and :meth:`stop` deletes its folder.
    """

    bindir: Path
    base: Path
    port: int
    password: str
    as_user: list[str]
    throwaway: bool = False

    @classmethod
    def at(cls, bindir: Path, base: Path, port: int, password: str, *, throwaway: bool = False) -> PgCluster:
        """The cluster in ``base`` (created or not); as root, ``base`` is handed to ``postgres``.

        ``base`` holds the server's socket, where local logins are trusted: it is the cluster
        user's alone (mode 0700), or any local user, a trial among them, could log in as the
        superuser through it."""
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o700)
        as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            pg = pwd.getpwnam("postgres")
            as_user = ["runuser", "-u", "postgres", "--"]
            os.chown(base, pg.pw_uid, pg.pw_gid)
        return cls(bindir, base, port, password, as_user, throwaway)

    @classmethod
    def start_throwaway(cls, bindir: Path, port: int | None = None) -> PgCluster:
        """A new cluster in a temporary folder, started on ``port`` (default: one the kernel picks),
        with an empty ``airflow`` database."""
        base = Path(tempfile.mkdtemp(prefix="det-pg-"))
        cluster = cls.at(bindir, base, port or free_port(), secrets.token_urlsafe(16), throwaway=True)
        try:
            cluster.create()
            cluster.start()
            cluster.create_database()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def exists(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    def running(self) -> bool:
        """Whether the server of this data folder runs (``pg_ctl status``)."""
        result = subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data), "status"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
        return result.returncode == 0

    def run(self, *args: str, input: str | None = None) -> str:
        """Run a PostgreSQL program as the cluster's user and answer its output; on failure, an
        error with its output and the tail of the server's log."""
        result = subprocess.run(
            [*self.as_user, *args],
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise PgClusterError(f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}{tail}")
        return result.stdout

    def create(self) -> None:
        """``initdb``: the cluster's files, with a ``postgres`` superuser of ``password``."""
        pwfile = self.base / "pwfile"
        pwfile.write_text(self.password + "\n")
        os.chown(pwfile, self.base.stat().st_uid, self.base.stat().st_gid)
        try:
            self.run(
                str(self.bindir / "initdb"),
                "-D", str(self.data),
                "-U", "postgres",
                "-E", "UTF8",
                "--no-locale",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={pwfile}",
            )  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)

    def start(self) -> None:
        """Start the server (sockets in ``base``, TCP on loopback) and wait until it accepts connections."""
        # Every Airflow component keeps a connection pool, and the API server's grows with the tasks
        # starting at once (see localairflow.write_config): more than the default 100 connections.
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c max_connections={MAX_CONNECTIONS}"
        if self.throwaway:
            options = f"{options} {_NOT_DURABLE}"
        self.run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip

    def create_database(self) -> None:
        """Create the empty ``airflow`` database."""
        self.run(
            str(self.bindir / "createdb"),
            "-h",
            str(self.base),
            "-p",
            str(self.port),
            "-U",
            "postgres",
            DATABASE,
        )

    def psql(self, sql: str) -> str:
        """Run SQL (read from stdin, so no secret shows in a command line) over the local socket."""
        return self.run(
            str(self.bindir / "psql"), "-h", str(self.base), "-p", str(self.port), "-U", "postgres",
            "-d", "postgres", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", input=sql,
        )  # fmt: skip

    def set_password(self) -> None:
        """Make ``password`` the ``postgres`` user's password (TCP logins use it)."""
        literal = self.password.replace("'", "''")
        self.psql(f"ALTER USER postgres PASSWORD '{literal}';\n")

    def ensure_database(self) -> None:
        """Create the ``airflow`` database unless it exists."""
        if not self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';\n").strip():
            self.create_database()

    def restart(self) -> None:
        """Stop the server at once (every connection dropped) and start it again, same options."""
        self.run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
            "-w", "-t", "60", "-m", "fast", "restart",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server (fast, else immediate); a throwaway cluster's folder is deleted."""
        pg_ctl = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "30"]
        try:
            self.run(*pg_ctl, "-m", "fast", "stop")
        except (PgClusterError, subprocess.TimeoutExpired):
            with contextlib.suppress(PgClusterError, subprocess.TimeoutExpired):
                self.run(*pg_ctl, "-m", "immediate", "stop")
        if self.throwaway:
            shutil.rmtree(self.base, ignore_errors=True)


__all__ = ["DATABASE", "PgCluster", "PgClusterError", "find_bindir", "free_port"]
