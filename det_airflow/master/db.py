"""The master's connection to its tables, and the explicit schema migration."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator

from sqlalchemy import Connection, Engine, create_engine, event, select

from det_airflow.master import migrations, schema
from det_airflow.master.migrations import SchemaError

__all__ = ["Database", "SchemaError", "get_database", "get_setting", "set_setting"]


class Database:
    """An engine over the master's tables, with transactions that serialize writers.

    SQLite has one writer at a time and reports contention as errors, so writes on SQLite are also
    serialized inside the process; PostgreSQL relies on row locks (``FOR UPDATE``).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict = {"pool_pre_ping": True, "future": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": 60, "check_same_thread": False}
        self.engine: Engine = create_engine(url, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._write_lock = threading.RLock()

    @contextlib.contextmanager
    def begin(self) -> Iterator[Connection]:
        """A read-write transaction."""
        if self.is_sqlite:
            with self._write_lock, self.engine.begin() as conn:
                yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    def schema_version(self) -> int | None:
        with self.read() as conn:
            return migrations.stored_version(conn)

    def migrate(self) -> tuple[int | None, int]:
        """Create or upgrade the det tables; returns (version before, version after)."""
        with self._write_lock:
            return migrations.upgrade(self.engine)

    def check(self) -> None:
        version = self.schema_version()
        if version != schema.SCHEMA_VERSION:
            found = "missing" if version is None else f"at version {version}"
            raise SchemaError(
                f"the det tables are {found}, expected version {schema.SCHEMA_VERSION}: run `det admin migrate`"
            )


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def get_setting(conn: Connection, key: str) -> str | None:
    return conn.execute(select(schema.settings.c.value).where(schema.settings.c.key == key)).scalar()


def set_setting(conn: Connection, key: str, value: str) -> None:
    table = schema.settings
    if conn.execute(select(table.c.key).where(table.c.key == key)).first():
        conn.execute(table.update().where(table.c.key == key).values(value=value))
    else:
        conn.execute(table.insert().values(key=key, value=value))


@functools.cache
def get_database() -> Database:
    """The database Airflow is configured with (`[database] sql_alchemy_conn`)."""
    from det_airflow.airflow_compat import conf

    return Database(conf.get("database", "sql_alchemy_conn"))
