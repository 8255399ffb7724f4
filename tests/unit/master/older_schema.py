"""A det database as an older det-airflow left it: version 1's tables brought step by step to a
given version, for tests that check that the rest of the upgrade keeps what people stored."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from det_airflow.master import migrations, schema
from det_airflow.master.db import Database
from tests.unit.master import schema_v1


def database_at(url: str, version: int) -> None:
    """Make the det tables at ``url`` as a det-airflow at schema ``version`` made them."""
    engine = create_engine(url)
    schema_v1.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(schema_v1.settings.insert().values(key="schema_version", value=str(schema_v1.VERSION)))
    engine.dispose()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            migrations, "MIGRATIONS", tuple(m for m in migrations.MIGRATIONS if m.version <= version)
        )
        patch.setattr(schema, "SCHEMA_VERSION", version)
        db = Database(url)
        try:
            assert db.migrate() == (schema_v1.VERSION, version)
        finally:
            db.engine.dispose()
