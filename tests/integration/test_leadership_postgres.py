"""On PostgreSQL, one API server process of the whole deployment runs the background jobs: the holder
of an advisory lock, which a broken connection or a dead process lets go."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from det_airflow.master import leadership

pytestmark = pytest.mark.integration


@pytest.fixture
def own_database(postgres_url: str) -> Iterator[str]:
    """A database of this test's own: an advisory lock is per database, and the Airflow the other
    integration tests run on the tests' server leads its own (its API server takes the lock)."""
    server = postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1)
    name = f"leadership_{secrets.token_hex(4)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_one_session_leads_and_losing_its_connection_lets_another_lead(own_database: str) -> None:
    url = own_database
    first_engine, second_engine = create_engine(url), create_engine(url)
    first, second = leadership.of(first_engine), leadership.of(second_engine)
    try:
        assert isinstance(first, leadership.AdvisoryLock)
        assert first.holds() and first.holds()
        assert not second.holds()
        first.release()
        assert second.holds() and not first.holds()

        # The leader's connection is cut (its process died, the server dropped it): another leads.
        with first_engine.connect() as admin:
            cut = (
                admin.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks "
                        "WHERE locktype = 'advisory' AND objid = :key AND granted "
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                    ),
                    {"key": leadership.ADVISORY_KEY},
                )
                .scalars()
                .all()
            )
            admin.commit()
        assert cut == [True]
        # The server ends the backend, and lets its locks go, an instant after answering.
        deadline = time.monotonic() + 30
        while not first.holds():
            assert time.monotonic() < deadline, "the cut leader's lock was never let go"
            time.sleep(0.1)
        assert not second.holds()  # it noticed its connection is gone, and the lock with it
    finally:
        first.release()
        second.release()
        first_engine.dispose()
        second_engine.dispose()
