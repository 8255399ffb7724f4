"""The master's app on SQLite, with Airflow's simple auth manager deciding who may do what.

Airflow's login (a JWT checked against Airflow's own tables) is the one thing replaced: the user is
named by the ``X-Test-User`` header. Every authorization decision is the real auth manager's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.api_fastapi.app import create_auth_manager, purge_cached_app
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import HTTPException, Request
from fastapi.testclient import TestClient
from sqlalchemy import select

from det_airflow.master import auth, removals, schema
from det_airflow.master.app import create_app
from det_airflow.master.auth import SERVICE_TOKEN_SETTING, hash_token
from det_airflow.master.db import Database, get_database, set_setting
from tests.unit.master.owners import checkpoint_root, owned_by

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ORIGIN = "http://testserver"

# name → simple auth manager role; "carol" may read only DAG det_1 (see PerDagAuthManager).
ROLES = {
    "viewer": "viewer",
    "alice": "user",
    "bob": "user",
    "admin": "admin",
    "carol": "viewer",
    "dave": "user",
}


class PerDagAuthManager(SimpleAuthManager):
    """The simple auth manager, except that carol may read DAG det_1 only: an auth manager that
    decides per DAG, as FAB's does with per-DAG permissions."""

    def is_authorized_dag(  # type: ignore[override]
        self, *, method: Any, user: SimpleAuthManagerUser, access_entity: Any = None, details: Any = None
    ) -> bool:
        if user.username == "carol":
            return isinstance(details, DagDetails) and details.id == "det_1" and method == "GET"
        if user.username == "dave" and isinstance(details, DagDetails) and details.id == "det_1":
            return False  # a user who may create experiments, but not read experiment 1
        return bool(
            super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        )

    def is_authorized_pool(  # type: ignore[override]
        self, *, method: Any, user: SimpleAuthManagerUser, details: Any = None
    ) -> bool:
        if user.username == "dave" and details is not None and details.name == "restricted":
            return False  # a pool an auth manager keeps from one user
        return bool(super().is_authorized_pool(method=method, user=user, details=details))


async def _user_from_header(request: Request) -> SimpleAuthManagerUser:
    name = request.headers.get("x-test-user")
    if name is None:
        raise HTTPException(401, "Not authenticated")
    return SimpleAuthManagerUser(username=name, role=ROLES[name])


@dataclass
class People:
    client: TestClient
    db: Database
    storage: Path

    def call(self, user: str | None, method: str, path: str, **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", {}))
        if user is not None:
            headers["X-Test-User"] = user
            # Stands for the login a real client sends; the body limit only looks for its presence.
            headers.setdefault("Authorization", f"Bearer login-of-{user}")
        return self.client.request(method, f"/api/v1{path}", headers=headers, **kwargs)

    def remove_files(self) -> int:
        """Run the master's own removal of queued files (no worker host reports); how many it did."""
        return removals.remove_here(self.db)

    def experiment(self, experiment_id: int) -> Any:
        with self.db.read() as conn:
            return conn.execute(
                select(schema.experiments).where(schema.experiments.c.id == experiment_id)
            ).one()

    def trial(self, trial_id: int) -> Any:
        with self.db.read() as conn:
            return conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).one()

    def checkpoint(self, uuid: str) -> Any:
        with self.db.read() as conn:
            return conn.execute(select(schema.checkpoints).where(schema.checkpoints.c.uuid == uuid)).one()

    def add_experiment(self, *, owner: str, state: str = "ACTIVE") -> int:
        config = {
            "name": "mnist",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
            "environment": {"environment_variables": ["WANDB_API_KEY=wandb-secret", "PLAIN=1"]},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(self.storage),
                "access_key": "storage-secret",
            },
            "data": {"secrets": {"token": "data-secret"}, "url": "https://example.org"},
        }
        with self.db.begin() as conn:
            result = conn.execute(
                schema.experiments.insert().values(
                    name="mnist",
                    owner=owner,
                    labels=["keep"],
                    state=state,
                    config=config,
                    config_yaml="name: mnist\n",
                    context=b"context-bytes",
                    resource_pool="default_pool",
                    searcher_name="single",
                    search_done=False,
                    progress=0.0,
                    start_time=NOW,
                    archived=False,
                )
            )
            experiment_id = int(result.inserted_primary_key[0])
            conn.execute(
                schema.experiments.update()
                .where(schema.experiments.c.id == experiment_id)
                .values(dag_id=f"det_{experiment_id}")
            )
        return experiment_id

    def add_trial(self, experiment_id: int, *, state: str, latest_checkpoint: str | None = None) -> int:
        with self.db.begin() as conn:
            result = conn.execute(
                schema.trials.insert().values(
                    experiment_id=experiment_id,
                    request_id=experiment_id * 100 + len(self._trial_ids(conn, experiment_id)),
                    state=state,
                    hparams={"lr": 0.1},
                    trial_seed=1,
                    summary={},
                    latest_checkpoint=latest_checkpoint,
                )
            )
            trial_id = int(result.inserted_primary_key[0])
            conn.execute(schema.trial_logs.insert().values(trial_id=trial_id, timestamp=NOW, message="hello"))
            conn.execute(
                schema.metrics.insert().values(
                    trial_id=trial_id,
                    group="validation",
                    steps_completed=10,
                    metrics={"loss": 0.5},
                    report_time=NOW,
                    trial_run_id=1,
                )
            )
        return trial_id

    @staticmethod
    def _trial_ids(conn: Any, experiment_id: int) -> list[int]:
        return list(
            conn.execute(
                select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
            ).scalars()
        )

    def add_checkpoint(self, trial_id: int, uuid: str, *, path: Path | None = None) -> Path:
        folder = path or self.storage / uuid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "state.pt").write_bytes(b"weights")
        trial = self.trial(trial_id)
        owned_by(self.db, self.experiment(trial.experiment_id).owner, folder)
        with self.db.begin() as conn:
            conn.execute(
                schema.checkpoints.insert().values(
                    uuid=uuid,
                    trial_id=trial_id,
                    experiment_id=trial.experiment_id,
                    steps_completed=10,
                    state="COMPLETED",
                    metadata={},
                    resources={"state.pt": 7},
                    size=7,
                    storage={"type": "shared_fs", "path": str(folder)},
                    report_time=NOW,
                )
            )
        return folder


@pytest.fixture
def people(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[People]:
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.PerDagAuthManager")
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", ORIGIN)
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_WORK_DIR", str(tmp_path / "det-trials"))
    get_database.cache_clear()
    db = get_database()
    db.migrate()
    create_auth_manager()
    app = create_app(background_jobs=False)  # tests run housekeeping's jobs themselves
    app.dependency_overrides[get_user] = _user_from_header
    # The checkpoint root as a root worker makes it; its folders belong to their owners' uids.
    storage = checkpoint_root(tmp_path / "checkpoints")
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(storage))
    try:
        with TestClient(app) as client:
            yield People(client, db, storage)
    finally:
        db.engine.dispose()
        get_database.cache_clear()
        purge_cached_app()


SERVICE_TOKEN = "service-token"


@pytest.fixture
def service_headers(people: People, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What det's own processes send: the service token of the det_default connection."""
    with people.db.begin() as conn:
        set_setting(conn, SERVICE_TOKEN_SETTING, hash_token(SERVICE_TOKEN))
    monkeypatch.setattr(auth, "_service_hash_cache", (0.0, None))
    return {"Authorization": f"Bearer {SERVICE_TOKEN}"}
