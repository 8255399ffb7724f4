"""The people app with the part of Airflow's metadata database that creating an experiment uses:
pools (the trial pool must exist) and DAG parsing requests, on the same SQLite file."""

from __future__ import annotations

import base64
import io
import tarfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from airflow import settings
from airflow.models.dagbag import DagPriorityParsingRequest
from airflow.models.pool import Pool
from airflow.models.team import Team
from sqlalchemy import func, select

from det_airflow.master import schema
from tests.unit.master.people_app import People

CONFIG = textwrap.dedent(
    """\
    name: tiny
    entrypoint: python3 train.py
    searcher:
      name: single
      metric: loss
      max_length: {batches: 10}
    environment:
      environment_variables: [WANDB_API_KEY=wandb-secret, PLAIN=1]
    checkpoint_storage:
      type: s3
      bucket: my-bucket
      access_key: AKIA-storage-key
      secret_key: storage-secret
    data:
      secrets: {token: data-secret}
      url: https://example.org
    resources:
      priority: 7
    max_restarts: 3
    """
)
SECRETS = ("wandb-secret", "AKIA-storage-key", "storage-secret", "data-secret")


def tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class Creator:
    people: People

    def create(self, user: str = "alice", config: str = CONFIG, **body: Any) -> Any:
        return self.people.call(user, "POST", "/experiments", json={"config": config, **body})

    def count(self) -> int:
        with self.people.db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.experiments)).scalar_one())

    def parse_requests(self) -> int:
        with settings.Session() as session:  # type: ignore[misc]
            return int(session.scalar(select(func.count()).select_from(DagPriorityParsingRequest)) or 0)


@pytest.fixture
def creator(people: People) -> Iterator[Creator]:
    saved = settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC
    settings.configure_vars()  # the people fixture pointed [database] at its SQLite file
    settings.reconfigure_orm()
    assert settings.engine is not None
    for model in (Team, Pool, DagPriorityParsingRequest):
        model.__table__.create(settings.engine, checkfirst=True)  # type: ignore[attr-defined]
    with settings.Session() as session:  # type: ignore[misc]
        session.add(Pool(pool="default_pool", slots=8, description="", include_deferred=False))
        session.commit()
    try:
        yield Creator(people)
    finally:
        settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC = saved
        settings.reconfigure_orm()


def load_yaml(text: str) -> Any:
    return yaml.safe_load(text)
