"""``experimental.client``'s experiments and trials against the real master app, served over a real
loopback socket on SQLite, with Airflow's own simple auth manager: its ``POST /auth/token`` logs in
with a password and its JWTs are checked on every request (nothing of the login is replaced)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from airflow import settings
from airflow.api_fastapi.app import init_auth_manager, purge_cached_app
from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager
from airflow.models.dagbag import DagPriorityParsingRequest
from airflow.models.pool import Pool
from airflow.models.revoked_token import RevokedToken
from airflow.models.team import Team
from fastapi import FastAPI
from sqlalchemy import select

from det_airflow import compat, trial_env
from det_airflow.api.user import CONFIG_DIR_ENV
from det_airflow.core._storage import CheckpointStorage, FolderStorage
from det_airflow.errors import APIError, ConfigError, DetError
from det_airflow.experimental import client
from det_airflow.master import schema
from det_airflow.master.app import create_app
from det_airflow.master.db import Database, get_database
from det_airflow.states import ExperimentState, TrialState
from tests.s3_server import s3_server, without_aws_credentials

from .conftest import _free_port

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
CONFIG = {
    "name": "mnist-const",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": 0.1, "layers": {"type": "categorical", "vals": [1, 2]}},
    "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Master:
    url: str
    db: Database

    def report(self, trial_id: int, group: str, steps: int, metrics: dict[str, Any], run: int = 1) -> None:
        """A metrics report of the trial's run ``run``, stored as the master stores one."""
        with self.db.begin() as conn:
            conn.execute(
                schema.metrics.insert().values(
                    trial_id=trial_id,
                    group=group,
                    steps_completed=steps,
                    metrics=metrics,
                    report_time=NOW,
                    trial_run_id=run,
                )
            )

    def checkpoint(
        self,
        trial_id: int,
        uuid: str,
        steps: int,
        metric: float | None,
        state: str = "COMPLETED",
        *,
        storage: CheckpointStorage | None = None,
    ) -> None:
        """A checkpoint registered as a trial registers one; with ``storage``, the files already
        written there for ``uuid``."""
        files = storage.files(uuid) if storage else {}
        where = storage.describe(uuid) if storage else {"type": "shared_fs", "path": f"/nowhere/{uuid}"}
        with self.db.begin() as conn:
            experiment_id = conn.execute(
                select(schema.trials.c.experiment_id).where(schema.trials.c.id == trial_id)
            ).scalar_one()
            conn.execute(
                schema.checkpoints.insert().values(
                    uuid=uuid,
                    trial_id=trial_id,
                    experiment_id=experiment_id,
                    steps_completed=steps,
                    state=state,
                    metadata={"steps_completed": steps},
                    resources=files,
                    size=sum(files.values()),
                    storage=where,
                    report_time=NOW,
                    validation_metric=metric,
                )
            )

    def project(self, workspace: str, project: str, owner: str) -> tuple[int, int]:
        """(project ID, workspace ID) of a new workspace holding a new project, both ``owner``'s."""
        common = {"created_by": owner, "created_at": NOW, "archived": False}
        with self.db.begin() as conn:
            workspace_id = conn.execute(
                schema.workspaces.insert().values(name=workspace, **common)
            ).inserted_primary_key[0]
            project_id = conn.execute(
                schema.projects.insert().values(
                    workspace_id=workspace_id, name=project, description="", notes="", **common
                )
            ).inserted_primary_key[0]
        return int(project_id), int(workspace_id)

    def uncategorized(self) -> tuple[int, int]:
        """(project ID, workspace ID) of the Uncategorized project."""
        p = schema.projects
        with self.db.read() as conn:
            row = conn.execute(select(p.c.id, p.c.workspace_id).where(p.c.name == schema.UNCATEGORIZED)).one()
        return int(row.id), int(row.workspace_id)

    def log(self, trial_id: int, message: str, *, level: str = "INFO", rank: int = 0) -> None:
        with self.db.begin() as conn:
            conn.execute(
                schema.trial_logs.insert().values(
                    trial_id=trial_id,
                    timestamp=NOW,
                    message=message,
                    level=level,
                    rank=rank,
                    stdtype="stdout",
                )
            )


def _clear_jwt_keys() -> None:
    # Airflow caches its JWT signer and validator per process: a test's secret must be the one used.
    BaseAuthManager._get_token_signer.cache_clear()  # type: ignore[attr-defined]
    BaseAuthManager._get_token_validator.cache_clear()  # type: ignore[attr-defined]


@pytest.fixture
def master(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Master]:
    """The master app at ``/det`` and Airflow's simple auth manager at ``/auth``; users alice and bob
    (role User) log in with their passwords. ``DET_MASTER`` points at it; no login is stored."""
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    env = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "alice:user,bob:user",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": "s" * 64,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__DET__CHECKPOINT_STORAGE_PATH": str(tmp_path / "checkpoints"),
        CONFIG_DIR_ENV: str(tmp_path / "det-config"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in (trial_env.TRIAL_ID, "DET_USER", "DET_PASS"):
        monkeypatch.delenv(name, raising=False)
    # The part of Airflow's metadata database that creating an experiment and checking a login use.
    saved = settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC
    settings.configure_vars()
    settings.reconfigure_orm()
    assert settings.engine is not None
    for model in (Team, Pool, DagPriorityParsingRequest, RevokedToken):
        model.__table__.create(settings.engine, checkfirst=True)  # type: ignore[attr-defined]
    with settings.Session() as session:  # type: ignore[misc]
        session.add(Pool(pool="default_pool", slots=8, description="", include_deferred=False))
        session.commit()
    get_database.cache_clear()
    db = get_database()
    db.migrate()
    _clear_jwt_keys()
    root = FastAPI()
    init_auth_manager(root)
    root.mount("/det", create_app(background_jobs=False))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(root, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the master's test server did not start within 30 s"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv(trial_env.MASTER, url)
    monkeypatch.setattr(client, "_login", (None, None, None))
    monkeypatch.setattr(client, "_determined", None, raising=False)
    try:
        yield Master(url, db)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        db.engine.dispose()
        get_database.cache_clear()
        purge_cached_app()
        _clear_jwt_keys()
        settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC = saved
        settings.reconfigure_orm()


def _model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text("print('training')\n")
    (folder / "data" / "big.bin").write_bytes(b"\0" * 1024)
    (folder / ".detignore").write_text("data/\n")
    return folder


def _members(archive: Path) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(archive.read_bytes()), mode="r:gz") as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}


# --- creating ------------------------------------------------------------------------------------


def test_create_experiment_from_a_yaml_path_packs_model_dir_as_det_experiment_create(
    master: Master, tmp_path: Path
) -> None:
    path = tmp_path / "const.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    extra = tmp_path / "shared.py"
    extra.write_text("SHARED = 1\n")
    client.login(master.url, "alice", "alice-pw")

    exp = client.create_experiment(str(path), model_dir=str(_model_dir(tmp_path)), includes=[extra])

    assert isinstance(exp, client.Experiment) and exp.name == "mnist-const"
    assert exp.state == client.ExperimentState.ACTIVE
    fetched = client.get_experiment(exp.id)
    assert (fetched.name, fetched.config["entrypoint"]) == ("mnist-const", "python3 train.py")
    assert fetched.config["searcher"]["metric"] == "loss"
    # The context is what `det experiment create` sends: .detignore honoured, includes at the top.
    code = Path(fetched.download_code(str(tmp_path / "out")))
    assert code.name == f"exp-{exp.id}_model_def.tar.gz"
    assert _members(code) == {".detignore", "train.py", "shared.py"}


def test_create_experiment_from_a_dict_with_an_explicit_determined(master: Master) -> None:
    alice = client.Determined(master=master.url, user="alice", password="alice-pw")

    exp = alice.create_experiment({**CONFIG, "name": "from-a-dict", "labels": ["dict"]})

    assert alice.get_session_username() == "alice"
    fetched = alice.get_experiment(exp.id)
    assert fetched.name == "from-a-dict" and fetched.config["labels"] == ["dict"]
    assert fetched.config["hyperparameters"]["lr"] == {"type": "const", "val": 0.1}  # normalized
    assert fetched.state == ExperimentState.ACTIVE
    assert [e.id for e in alice.list_experiments(name="from-a-dict")] == [exp.id]


def test_an_invalid_config_is_refused_before_anything_is_sent(master: Master, tmp_path: Path) -> None:
    client.login(master.url, "alice", "alice-pw")
    with pytest.raises(ConfigError, match="searcher"):
        client.create_experiment({"name": "no-searcher", "entrypoint": "python3 train.py"})
    with pytest.raises(ConfigError, match="no-such.yaml: cannot read the file"):
        client.create_experiment(str(tmp_path / "no-such.yaml"))
    with pytest.raises(ValueError, match="config parameter must be dictionary or path"):
        client.create_experiment(42)  # type: ignore[arg-type]
    assert client.list_experiments() == []


# --- reading and filtering -----------------------------------------------------------------------


def test_list_experiments_filters_by_name_users_states_ids_and_labels(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    bob = client.Determined(master.url, "bob", "bob-pw")
    a = alice.create_experiment({**CONFIG, "name": "mnist-a"})
    b = alice.create_experiment({**CONFIG, "name": "MNIST-b"})
    c = bob.create_experiment({**CONFIG, "name": "cifar"})
    b.pause()
    a.add_label("keep")

    def ids(**filters: Any) -> list[int]:
        return [e.id for e in alice.list_experiments(**filters)]

    assert ids() == [a.id, b.id, c.id]
    assert ids(name="mnist") == [a.id, b.id]  # any case, a part of the name
    assert ids(users=["bob"]) == [c.id]
    assert ids(states=[ExperimentState.PAUSED]) == [b.id]
    assert ids(states=[ExperimentState.ACTIVE], users=["alice"]) == [a.id]
    assert ids(experiment_ids=[c.id, a.id]) == [a.id, c.id]
    assert ids(labels=["keep"]) == [a.id]
    assert ids(sort_by=client.ExperimentSortBy.NAME, order_by=client.OrderBy.DESC) == [a.id, c.id, b.id]
    listed = {e.id: e for e in alice.list_experiments()}
    assert listed[c.id].config["name"] == "cifar"  # read on first use
    assert listed[a.id].labels == {"keep"} and listed[b.id].labels is None


def test_pause_activate_and_kill_change_what_get_experiment_shows(master: Master) -> None:
    client.login(master.url, "alice", "alice-pw")
    exp = client.create_experiment(CONFIG)

    exp.pause()
    assert client.get_experiment(exp.id).state == ExperimentState.PAUSED
    with pytest.raises(ValueError, match=f"Experiment {exp.id} is in paused state"):
        exp.wait(interval=0.01)
    exp.activate()
    assert client.get_experiment(exp.id).state == ExperimentState.ACTIVE
    exp.kill()
    # None of its trials had started: they are canceled, and so is the experiment.
    assert exp.wait(interval=0.01) == ExperimentState.CANCELED
    assert client.get_experiment(exp.id).state == ExperimentState.CANCELED
    assert {t.state for t in exp.list_trials()} == {TrialState.CANCELED}
    exp.archive()
    assert [e.archived for e in client.list_experiments(experiment_ids=[exp.id])] == [True]
    exp.unarchive()
    assert client.get_experiment(exp.id).archived is False


def test_set_description_and_labels_are_kept_by_the_master(master: Master) -> None:
    client.login(master.url, "alice", "alice-pw")
    exp = client.create_experiment(CONFIG)
    exp.set_description("baseline")
    exp.add_label("a")
    exp.add_label("b")
    exp.remove_label("a")
    fetched = client.get_experiment(exp.id)
    assert (fetched.description, fetched.labels) == ("baseline", {"b"})
    exp.set_labels({"c", "d"})
    assert client.get_experiment(exp.id).labels == {"c", "d"}


def test_set_notes_is_kept_by_the_master_and_seen_after_reload(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    exp = alice.create_experiment(CONFIG)
    assert exp.notes == ""
    other = alice.get_experiment(exp.id)

    exp.set_notes("# Baseline\n\nlr 0.1, two layers")

    assert exp.notes == "# Baseline\n\nlr 0.1, two layers"
    assert other.notes == ""  # as last loaded
    other.reload()
    assert other.notes == exp.notes
    assert [e.notes for e in alice.list_experiments()] == [exp.notes]
    assert exp.description is None  # the other fields are untouched
    exp.set_notes("")
    assert alice.get_experiment(exp.id).notes == ""


def test_notes_of_another_users_experiment_or_with_a_nul_are_refused(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    bob = client.Determined(master.url, "bob", "bob-pw")
    exp = alice.create_experiment(CONFIG)
    exp.set_notes("alice's plan")

    with pytest.raises(APIError) as denied:
        bob.get_experiment(exp.id).set_notes("bob's plan")
    assert denied.value.status_code == 403
    with pytest.raises(APIError, match="notes") as invalid:
        exp.set_notes("a\x00b")
    assert invalid.value.status_code == 422
    assert alice.get_experiment(exp.id).notes == "alice's plan"


def test_experiments_carry_their_project_and_workspace(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    project_id, workspace_id = master.project("vision", "mnist", owner="alice")
    uncategorized = master.uncategorized()

    placed = alice.create_experiment(CONFIG, project_id=project_id)
    loose = alice.create_experiment(CONFIG)

    assert (placed.project_id, placed.workspace_id) == (project_id, workspace_id)
    assert (loose.project_id, loose.workspace_id) == uncategorized
    fetched = alice.get_experiment(placed.id)
    assert (fetched.project_id, fetched.workspace_id) == (project_id, workspace_id)
    assert {e.id: (e.project_id, e.workspace_id) for e in alice.list_experiments()} == {
        placed.id: (project_id, workspace_id),
        loose.id: uncategorized,
    }
    assert [e.id for e in alice.list_experiments(project_id=uncategorized[0])] == [loose.id]
    by_project = alice.list_experiments(
        sort_by=client.ExperimentSortBy.PROJECT_ID, order_by=client.OrderBy.DESC
    )
    assert [e.id for e in by_project] == [placed.id, loose.id]  # the new project's ID is the larger
    placed.move_to_project(schema.UNCATEGORIZED, schema.UNCATEGORIZED)
    fetched.reload()
    assert (fetched.project_id, fetched.workspace_id) == uncategorized


def test_get_trial_has_its_hparams_state_and_experiment(master: Master) -> None:
    client.login(master.url, "alice", "alice-pw")
    exp = client.create_experiment(CONFIG)

    trials = exp.list_trials()

    assert sorted(t.hparams["layers"] for t in trials if t.hparams) == [1, 2]  # the grid's two points
    trial = client.get_trial(trials[0].id)
    assert isinstance(trial, client.Trial) and trial.experiment_id == exp.id
    assert trial.hparams == trials[0].hparams and trial.hparams is not None and trial.hparams["lr"] == 0.1
    assert trial.state == TrialState.QUEUED
    assert trial.get_experiment().id == exp.id
    trial.kill()
    trial.reload()
    assert trial.state == TrialState.CANCELED
    assert [
        t.id for t in exp.list_trials(sort_by=client.TrialSortBy.ID, order_by=client.OrderBy.DESC)
    ] == sorted((t.id for t in trials), reverse=True)


def test_a_missing_experiment_or_trial_is_a_404_apierror(master: Master) -> None:
    client.login(master.url, "alice", "alice-pw")
    with pytest.raises(APIError, match="experiment 4242") as exp_error:
        client.get_experiment(4242)
    assert exp_error.value.status_code == 404
    with pytest.raises(APIError, match="trial 4343") as trial_error:
        client.get_trial(4343)
    assert trial_error.value.status_code == 404


def test_a_wrong_password_fails_at_login(master: Master) -> None:
    with pytest.raises(APIError, match="invalid username or password") as error:
        client.Determined(master.url, "alice", "not-her-password")
    assert error.value.status_code == 401


def test_trial_logs_are_its_messages_filtered_as_asked(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    trial = alice.create_experiment(CONFIG).list_trials()[0]
    master.log(trial.id, "epoch 1: loss 0.5")
    master.log(trial.id, "data loader slow", level="WARNING", rank=1)
    master.log(trial.id, "epoch 2: loss 0.4")

    assert list(trial.iter_logs()) == ["epoch 1: loss 0.5", "data loader slow", "epoch 2: loss 0.4"]
    assert list(trial.iter_logs(head=1)) == ["epoch 1: loss 0.5"]
    assert list(trial.iter_logs(tail=1)) == ["epoch 2: loss 0.4"]
    assert list(trial.iter_logs(search_text="EPOCH")) == ["epoch 1: loss 0.5", "epoch 2: loss 0.4"]
    assert list(trial.iter_logs(min_level=client.LogLevel.WARNING)) == ["data loader slow"]
    assert list(trial.iter_logs(rank_ids=[1])) == ["data loader slow"]
    with pytest.warns(FutureWarning, match="iter_logs"):
        assert len(list(trial.logs())) == 3
    with pytest.raises(ValueError, match="head must be non-negative"):
        trial.iter_logs(head=-1)


# --- metrics and checkpoints ---------------------------------------------------------------------


def test_iter_trials_metrics_yields_what_the_trials_reported(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    first, second = (t.id for t in alice.create_experiment(CONFIG).list_trials())
    master.report(second, "validation", 10, {"loss": 0.5})
    master.report(first, "validation", 20, {"loss": 0.3, "accuracy": 0.9})
    master.report(first, "validation", 10, {"loss": 0.4, "accuracy": 0.8})
    master.report(first, "training", 10, {"loss": 0.7})

    reports = list(alice.iter_trials_metrics([second, first], group="validation"))

    assert [(r.trial_id, r.steps_completed, r.metrics, r.group) for r in reports] == [
        (first, 10, {"loss": 0.4, "accuracy": 0.8}, "validation"),
        (first, 20, {"loss": 0.3, "accuracy": 0.9}, "validation"),
        (second, 10, {"loss": 0.5}, "validation"),
    ]
    assert all(isinstance(r, client.TrialMetrics) and r.end_time == NOW for r in reports)
    assert reports[0].total_batches == 10
    with pytest.raises(ValueError, match="at least one trial"):
        alice.iter_trials_metrics([], group="validation")
    with pytest.warns(FutureWarning, match="iter_trials_metrics"):
        training = list(alice.stream_trials_training_metrics([first]))
    assert [(type(r), r.group, r.metrics) for r in training] == [
        (client.TrainingMetrics, "training", {"loss": 0.7})
    ]
    client.login(master.url, "alice", "alice-pw")
    with pytest.warns(FutureWarning, match="client.iter_trials_metrics"):
        assert len(list(client.stream_trials_metrics([first], "validation"))) == 2
    trial = alice.get_trial(first)
    assert [r.steps_completed for r in trial.iter_metrics("validation")] == [10, 20]
    # Determined's summary: per group, per metric.
    assert trial.summary_metrics["validation_metrics"]["loss"] == pytest.approx(
        {"type": "number", "count": 2, "min": 0.3, "max": 0.4, "sum": 0.7, "mean": 0.35, "last": 0.3}
    )
    assert trial.summary_metrics["avg_metrics"]["loss"]["last"] == 0.7


def test_each_report_names_the_trial_run_that_made_it(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    trial = alice.create_experiment(CONFIG).list_trials()[0]
    master.report(trial.id, "training", 10, {"loss": 0.7}, run=1)
    master.report(trial.id, "training", 20, {"loss": 0.6}, run=2)  # after the trial restarted

    assert [(r.steps_completed, r.trial_run_id) for r in trial.iter_metrics("training")] == [(10, 1), (20, 2)]
    assert [r.trial_run_id for r in alice.iter_trials_metrics([trial.id], "training")] == [1, 2]


def test_list_checkpoints_best_first_by_the_searcher_metric(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    exp = alice.create_experiment(CONFIG)
    first, second = (t.id for t in exp.list_trials())
    master.checkpoint(first, "00000000-0000-4000-8000-000000000001", 10, 0.4)
    master.checkpoint(first, "00000000-0000-4000-8000-000000000002", 20, 0.2)
    master.checkpoint(second, "00000000-0000-4000-8000-000000000003", 10, None)
    master.checkpoint(second, "00000000-0000-4000-8000-000000000004", 20, 0.3)
    master.checkpoint(second, "00000000-0000-4000-8000-000000000005", 30, 0.1, state="DELETED")

    def uuids(found: list[client.Checkpoint]) -> list[str]:
        return [c.uuid[-1] for c in found]

    assert uuids(exp.list_checkpoints()) == ["2", "4", "1", "3"]  # smaller loss is better; none last
    assert uuids(exp.list_checkpoints(max_results=1)) == ["2"]
    by_steps = exp.list_checkpoints(
        sort_by=client.CheckpointSortBy.BATCH_NUMBER, order_by=client.OrderBy.DESC
    )
    assert uuids(by_steps) == ["2", "4", "1", "3"]
    assert uuids(alice.get_trial(second).list_checkpoints()) == ["4", "3"]
    with pytest.warns(FutureWarning):
        assert exp.top_checkpoint().uuid.endswith("2")
    with pytest.raises(AssertionError, match="sort_by and order_by"):
        exp.list_checkpoints(sort_by=client.CheckpointSortBy.UUID)


def _write_checkpoint(storage: CheckpointStorage, uuid: str) -> None:
    with storage.writing(uuid) as folder:
        (folder / "state").mkdir()
        (folder / "model.pt").write_bytes(b"m" * 2048)
        (folder / "state" / "optimizer.pt").write_bytes(b"o" * 1024)


def _assert_checkpoint_files(folder: Path) -> None:
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "model.pt",
        "state/optimizer.pt",
    ]
    assert (folder / "model.pt").read_bytes() == b"m" * 2048
    assert (folder / "state" / "optimizer.pt").read_bytes() == b"o" * 1024


def test_a_listed_checkpoint_in_a_folder_downloads_off_cluster_from_that_folder(
    master: Master, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where an off-cluster local store would be: nothing there
    alice = client.Determined(master.url, "alice", "alice-pw")
    exp = alice.create_experiment(CONFIG)
    trial_id = exp.list_trials()[0].id
    uuid = "00000000-0000-4000-8000-0000000000a1"
    storage = FolderStorage(tmp_path / "mounted")
    _write_checkpoint(storage, uuid)
    master.checkpoint(trial_id, uuid, 10, 0.2, storage=storage)

    [checkpoint] = exp.list_checkpoints()
    downloaded = checkpoint.download(str(tmp_path / "out"))

    assert downloaded == str(tmp_path / "out")
    _assert_checkpoint_files(tmp_path / "out")
    assert checkpoint.metadata == {"steps_completed": 10}
    _assert_checkpoint_files(
        Path(alice.get_trial(trial_id).list_checkpoints()[0].download(str(tmp_path / "t")))
    )
    # Without a path, as in Determined: checkpoints/<uuid> under the current folder.
    assert checkpoint.download() == str(Path("checkpoints", uuid))
    _assert_checkpoint_files(tmp_path / "checkpoints" / uuid)
    # A model version's checkpoint is the master's too.
    version = alice.create_model("mnist").register_version(uuid)
    _assert_checkpoint_files(Path(version.checkpoint.download(str(tmp_path / "registered"))))
    # The master streams object storage only, as `det checkpoint download --mode master` says.
    with pytest.raises(DetError, match="the master does not serve"):
        checkpoint.download(str(tmp_path / "again"), mode=client.DownloadMode.MASTER)


def test_a_listed_checkpoint_in_a_bucket_is_streamed_through_the_master(
    master: Master, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This machine has no credentials for the bucket: only the master's (in the config) reach it.
    without_aws_credentials(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    uuid = "00000000-0000-4000-8000-0000000000b2"
    with s3_server("ckpts") as url:
        monkeypatch.setenv("AIRFLOW__DET__ALLOWED_STORAGE_ENDPOINTS", url)  # as an admin allows it
        # The server's buckets outlive it within this process: each test writes under its own prefix.
        section = {
            "type": "s3",
            "bucket": "ckpts",
            "prefix": tmp_path.name,
            "endpoint_url": url,
            "access_key": "k",
            "secret_key": "s",
        }
        alice = client.Determined(master.url, "alice", "alice-pw")
        bob = client.Determined(master.url, "bob", "bob-pw")
        exp = alice.create_experiment({**CONFIG, "checkpoint_storage": section})
        trial_id = exp.list_trials()[0].id
        storage = CheckpointStorage.from_config(section)
        _write_checkpoint(storage, uuid)
        master.checkpoint(trial_id, uuid, 10, 0.2, storage=storage)

        [checkpoint] = alice.get_trial(trial_id).list_checkpoints()
        checkpoint.download(str(tmp_path / "out"))
        _assert_checkpoint_files(tmp_path / "out")
        # Another reader of the experiment, by UUID, through the master in so many words.
        bob.get_checkpoint(uuid).download(str(tmp_path / "bob"), mode="master")
        _assert_checkpoint_files(tmp_path / "bob")
        with pytest.raises(DetError, match="no credentials found"):
            checkpoint.download(str(tmp_path / "direct"), mode=client.DownloadMode.DIRECT)
    assert not (tmp_path / "direct" / "model.pt").exists()


# --- user code -----------------------------------------------------------------------------------


def test_user_code_uses_it_as_determined_experimental_client(master: Master) -> None:
    alice = client.Determined(master.url, "alice", "alice-pw")
    exp = alice.create_experiment({**CONFIG, "name": "seen-by-user-code"})
    program = textwrap.dedent(
        f"""
        from determined.experimental import client
        from determined.experimental.client import Determined, ExperimentState

        exp = client.get_experiment({exp.id})
        print(exp.name, exp.state == ExperimentState.ACTIVE, len(exp.list_trials()))
        print(client.Determined is Determined)
        try:
            client.create_user
        except AttributeError as exc:
            print(exc)
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(compat.determined_root()),
        "DET_MASTER": master.url,
        "DET_USER": "alice",
        "DET_PASS": "alice-pw",
    }
    result = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["seen-by-user-code True 2", "True"]
    assert lines[2].startswith("determined.experimental.client.create_user: det-airflow's client offers")
