"""The Core API of a trial whose checkpoint storage's credentials are the platform's: its files go
through the master (served for real on loopback), into each store's local server behind Airflow's
connection of its type. The trial's environment holds no credentials of the store.

A checkpoint is stored, registered, restored, listed, read and deleted as with the store's own
client; a failure leaves nothing behind; another user's checkpoint is refused; the trial's
TensorBoard files reach the store and a TensorBoard showing the trial fetches them back."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow import core
from det_airflow.api.runtime_storage import StorageClient
from det_airflow.core._tensorboard import fetch_tensorboard, tensorboard_prefix
from det_airflow.errors import DetError
from det_airflow.master import schema, trial_storage
from det_airflow.trial_process import TrialSpec, trial_environment, write_trial_files
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.master.served import give_token, served
from tests.unit.master.stores import STORE_KINDS, Store, running_store

BUCKET = "core-files"
PREFIX = "team-a"
WEIGHTS = bytes(range(256)) * 2048  # 512 KiB
# What of a store's own settings the machine may hold; a trial here has none of them.
_STORE_VARIABLES = ("AWS_", "GOOGLE_", "AZURE_", "STORAGE_EMULATOR_HOST", "DET_GCS_CREDENTIALS")


@pytest.fixture(scope="module", params=STORE_KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    with running_store(request.param, BUCKET) as running:
        yield running


@dataclass
class Cluster:
    people: People
    store: Store
    url: str
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch

    def experiment(self, owner: str, *, task: dict[str, Any] | None = None) -> tuple[int, int]:
        """An experiment of ``owner`` keeping checkpoints in the store, and its running trial."""
        app = self.people
        experiment_id = app.add_experiment(owner=owner)
        config = {**app.experiment(experiment_id).config}
        config["checkpoint_storage"] = {**self.store.section, "prefix": PREFIX}
        with app.db.begin() as conn:
            conn.execute(
                update(schema.experiments)
                .where(schema.experiments.c.id == experiment_id)
                .values(config=config)
            )
            if task is not None:
                conn.execute(schema.tasks.insert().values(id=experiment_id, config={}, **task))
        trial_id = app.add_trial(experiment_id, state="RUNNING")
        give_token(app, trial_id, f"token-{trial_id}")
        return experiment_id, trial_id

    def become(self, experiment_id: int, trial_id: int) -> None:
        """This process is trial ``trial_id``'s, as its runner starts it."""
        config = dict(self.people.experiment(experiment_id).config)
        spec = TrialSpec(
            trial_id=trial_id, experiment_id=experiment_id, request_id="r", trial_seed=1, config=config
        )
        workdir = self.tmp_path / f"trial-{trial_id}"
        write_trial_files(spec, workdir)
        env = trial_environment(spec, master_url=self.url, token=f"token-{trial_id}", workdir=workdir)
        for name, value in env.items():
            if name.startswith("DET_"):
                self.monkeypatch.setenv(name, value)

    def objects(self) -> dict[str, bytes]:
        return {k: v for k, v in self.store.objects().items() if k.startswith(f"{PREFIX}/")}


@pytest.fixture
def cluster(
    people: People,  # noqa: F811
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Cluster]:
    for name in list(os.environ):
        if name.startswith(_STORE_VARIABLES):
            monkeypatch.delenv(name)
    variable, connection = store.connection
    monkeypatch.setenv(variable, json.dumps(connection))  # the master's; never the trial's
    trial_storage.stores.clear()
    for key in store.objects():  # each test starts from an empty prefix
        store_delete(store, key)
    with served(people) as url:
        yield Cluster(people, store, url, tmp_path, monkeypatch)
    trial_storage.stores.clear()


def store_delete(store: Store, key: str) -> None:
    """Remove one object with the platform's own credentials (through the master's store class)."""
    from det_airflow import object_storage

    opened = object_storage.open_storage(store.section)
    with opened.translated():
        opened._delete("cleanup", [key])  # noqa: SLF001 - the test empties the shared bucket


def test_a_checkpoint_goes_to_the_store_through_the_master_and_comes_back(cluster: Cluster) -> None:
    experiment_id, trial_id = cluster.experiment("alice")
    cluster.become(experiment_id, trial_id)

    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 4, "framework": "torch"}) as (path, uuid):
            (path / "weights.bin").write_bytes(WEIGHTS)
            (path / "state").mkdir()
            (path / "state" / "step").write_text("4")
        stored = cluster.objects()
        assert set(stored) == {
            f"{PREFIX}/{uuid}/{name}" for name in ("weights.bin", "state/step", "metadata.json")
        }
        assert stored[f"{PREFIX}/{uuid}/weights.bin"] == WEIGHTS
        record = cluster.people.checkpoint(uuid)
        assert record.trial_id == trial_id and record.resources["weights.bin"] == len(WEIGHTS)

        with ctx.checkpoint.restore_path(uuid) as restored:
            assert (restored / "weights.bin").read_bytes() == WEIGHTS
            assert (restored / "state" / "step").read_text() == "4"
        ctx.checkpoint.download(
            uuid, cluster.tmp_path / "some", selector=lambda name: name.startswith("state/")
        )
        assert [p.name for p in (cluster.tmp_path / "some").rglob("*") if p.is_file()] == ["step"]
        assert ctx.checkpoint.get_metadata(uuid) == {"steps_completed": 4, "framework": "torch"}

        ctx.checkpoint.delete(uuid)
    assert cluster.objects() == {}
    assert cluster.people.checkpoint(uuid).state == "DELETED"


def test_the_owners_next_trial_resumes_from_the_checkpoint(cluster: Cluster) -> None:
    experiment_id, first = cluster.experiment("alice")
    cluster.become(experiment_id, first)
    with core.init() as ctx:
        uuid = ctx.checkpoint.upload(_folder(cluster.tmp_path / "src"), {"steps_completed": 1})

    other_experiment, second = cluster.experiment("alice")
    cluster.become(other_experiment, second)
    with core.init() as ctx, ctx.checkpoint.restore_path(uuid) as restored:
        assert (restored / "weights.bin").read_bytes() == WEIGHTS


def test_another_users_checkpoint_is_refused(cluster: Cluster) -> None:
    experiment_id, alices = cluster.experiment("alice")
    cluster.become(experiment_id, alices)
    with core.init() as ctx:
        uuid = ctx.checkpoint.upload(_folder(cluster.tmp_path / "src"), {"steps_completed": 1})
    before = cluster.objects()

    experiment_id, bobs = cluster.experiment("bob")
    cluster.become(experiment_id, bobs)
    with core.init() as ctx:
        with pytest.raises(DetError) as refused:
            ctx.checkpoint.download(uuid, cluster.tmp_path / "stolen")
        assert str(refused.value) == (
            f"permission denied: trial {bobs} may not read checkpoint {uuid}: it belongs to another "
            "user's experiment and is not the checkpoint this experiment warm-starts from"
        )
        with pytest.raises(DetError, match="permission denied"):
            ctx.checkpoint.get_metadata(uuid)
    assert not (cluster.tmp_path / "stolen").exists()
    assert cluster.objects() == before


def test_a_failure_inside_the_block_uploads_and_registers_nothing(cluster: Cluster) -> None:
    experiment_id, trial_id = cluster.experiment("alice")
    cluster.become(experiment_id, trial_id)
    with core.init() as ctx, pytest.raises(OSError, match="disk full"):
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "half.pt").write_bytes(b"x")
            raise OSError("disk full")
    assert cluster.objects() == {}
    assert cluster.people.trial(trial_id).latest_checkpoint is None


def test_an_upload_failing_midway_takes_back_what_it_sent(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment_id, trial_id = cluster.experiment("alice")
    cluster.become(experiment_id, trial_id)
    put = StorageClient.put_checkpoint_file

    def cut_off_after_the_first_file(client: StorageClient, uuid: str, relative: str, path: Path) -> None:
        if cluster.objects():
            raise ConnectionError("network down")
        put(client, uuid, relative, path)

    monkeypatch.setattr(StorageClient, "put_checkpoint_file", cut_off_after_the_first_file)
    with core.init() as ctx, pytest.raises(ConnectionError, match="network down"):
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "a.bin").write_bytes(b"first")
            (path / "b.bin").write_bytes(b"second")
    assert cluster.objects() == {}
    assert cluster.people.trial(trial_id).latest_checkpoint is None


def test_tensorboard_files_reach_the_store_and_a_tensorboard_fetches_them(cluster: Cluster) -> None:
    experiment_id, trial_id = cluster.experiment("alice")
    cluster.become(experiment_id, trial_id)
    with core.init() as ctx:
        (ctx.train.get_tensorboard_path() / "notes.txt").write_text("first")
        ctx.train.report_training_metrics(1, {"loss": 0.5})
    folder = f"{PREFIX}/{tensorboard_prefix(experiment_id, trial_id)}"
    assert cluster.objects()[folder + "notes.txt"] == b"first"
    assert any(key.startswith(folder + "events.out.tfevents.") for key in cluster.objects())

    sources = {"sources": [{"experiment_id": experiment_id, "trial_id": trial_id}]}
    _, board = cluster.experiment("alice", task={"type": "tensorboard", "args": sources})
    _, strangers_board = cluster.experiment("bob", task={"type": "tensorboard", "args": {"sources": []}})
    section = {**cluster.store.section, "prefix": PREFIX}
    dest = cluster.tmp_path / "shown"
    client = StorageClient(cluster.url, f"token-{board}", board)
    assert fetch_tensorboard(section, experiment_id, trial_id, dest, client=client) == 2
    assert (dest / "notes.txt").read_text() == "first"
    assert fetch_tensorboard(section, experiment_id, trial_id, dest, client=client) == 0

    stranger = StorageClient(cluster.url, f"token-{strangers_board}", strangers_board)
    with pytest.raises(DetError, match=f"may not read the TensorBoard files of trial {trial_id}"):
        fetch_tensorboard(section, experiment_id, trial_id, cluster.tmp_path / "stolen", client=stranger)


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(WEIGHTS)
    return path


def test_a_large_file_the_master_refuses_is_refused_with_its_reason(cluster: Cluster) -> None:
    experiment_id, alices = cluster.experiment("alice")
    cluster.become(experiment_id, alices)
    with core.init() as ctx:
        uuid = ctx.checkpoint.upload(_folder(cluster.tmp_path / "src"), {"steps_completed": 1})
    _, bobs = cluster.experiment("bob")
    large = cluster.tmp_path / "large.bin"
    with large.open("wb") as out:
        out.truncate(64 * 1024**2)  # refused before the master reads it

    with pytest.raises(DetError) as refused:
        StorageClient(cluster.url, f"token-{bobs}", bobs).put_checkpoint_file(uuid, "weights.bin", large)
    assert str(refused.value) == (
        f"checkpoint {uuid} is registered: its files never change; a new checkpoint needs a new uuid"
    )
    assert cluster.objects()[f"{PREFIX}/{uuid}/weights.bin"] == WEIGHTS
