"""Files beside the checkpoints (``torch_batch_process``'s ``upload_path()`` output, Determined's
``storage_manager.store_path(dst)``): ``<uuid>/<folder>/`` of the checkpoint storage, added to by
each call, registered as no checkpoint. In a folder, on S3 with the owner's own keys (moto's
server), and through the master (served on loopback) when the platform holds the keys."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import update

from det_airflow import core
from det_airflow.core import CheckpointStorage
from det_airflow.errors import DetError
from det_airflow.master import schema, trial_storage
from det_airflow.trial_process import TrialSpec, trial_environment, write_trial_files
from tests.s3_server import s3_server, without_aws_credentials
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.master.served import give_token, served
from tests.unit.master.stores import Store, running_store

OUTPUT = str(uuid.uuid4())


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def test_a_folder_storage_adds_the_files_in_place(tmp_path: Path) -> None:
    storage = CheckpointStorage.from_config({"type": "shared_fs", "host_path": str(tmp_path / "ckpts")})
    with storage.adding(OUTPUT, "rank_1") as path:
        assert path == tmp_path / "ckpts" / OUTPUT / "rank_1"
        _write(path, {"a.txt": "first", "sub/b.txt": "b"})
    with storage.adding(OUTPUT, "rank_1") as path:
        _write(path, {"a.txt": "second", "c.txt": "c"})
    assert storage.files(OUTPUT) == {"rank_1/a.txt": 6, "rank_1/c.txt": 1, "rank_1/sub/b.txt": 1}
    for folder in (tmp_path / "ckpts" / OUTPUT, tmp_path / "ckpts" / OUTPUT / "rank_1"):
        assert folder.stat().st_mode & 0o777 == 0o700  # the owner's alone, as a checkpoint's folder
    with pytest.raises(DetError, match="expected a relative path inside the checkpoint"):
        storage.adding(OUTPUT, "../elsewhere").__enter__()


@pytest.fixture
def s3_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The owner's own keys; nothing of the machine's AWS setup reaches the test."""
    without_aws_credentials(monkeypatch, tmp_path)
    return {"access_key": "testing-key", "secret_key": "testing-secret"}


def test_an_object_store_uploads_the_files_when_the_block_succeeds(s3_keys: dict[str, str]) -> None:
    with s3_server("outputs") as url:
        section = {"type": "s3", "bucket": "outputs", "prefix": "team-a", "endpoint_url": url, **s3_keys}
        storage = CheckpointStorage.from_config(section)
        client = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id=s3_keys["access_key"],
            aws_secret_access_key=s3_keys["secret_key"],
        )

        def objects() -> dict[str, bytes]:
            listed = client.list_objects_v2(Bucket="outputs").get("Contents", [])
            return {
                o["Key"]: client.get_object(Bucket="outputs", Key=o["Key"])["Body"].read() for o in listed
            }

        with storage.adding(OUTPUT, "rank_0") as path:
            _write(path, {"a.txt": "first", "sub/b.txt": "b"})
        with pytest.raises(OSError, match="disk full"), storage.adding(OUTPUT, "rank_0") as path:
            _write(path, {"half.txt": "x"})
            raise OSError("disk full")
        with storage.adding(OUTPUT, "rank_1") as path:
            _write(path, {"a.txt": "other rank"})
        with storage.adding(OUTPUT, "rank_0") as path:
            _write(path, {"a.txt": "second"})
        assert objects() == {
            f"team-a/{OUTPUT}/rank_0/a.txt": b"second",
            f"team-a/{OUTPUT}/rank_0/sub/b.txt": b"b",
            f"team-a/{OUTPUT}/rank_1/a.txt": b"other rank",
        }
        assert not path.exists()  # the local copy is gone


# --- through the master ----------------------------------------------------------------------------


@pytest.fixture
def s3_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store whose keys are the platform's (an Airflow connection), never the trial's."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "DET_")):
            monkeypatch.delenv(name)
    with running_store("s3", "platform") as store:
        variable, connection = store.connection
        monkeypatch.setenv(variable, json.dumps(connection))
        trial_storage.stores.clear()
        yield store
    trial_storage.stores.clear()


def _become_trial(app: People, owner: str, store: Store, url: str, tmp_path: Path, mp: Any) -> int:
    """This process is the running trial of a new experiment of ``owner`` checkpointing to ``store``."""
    experiment_id = app.add_experiment(owner=owner)
    config = {**app.experiment(experiment_id).config, "checkpoint_storage": {**store.section, "prefix": "p"}}
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id).values(config=config)
        )
    trial_id = app.add_trial(experiment_id, state="RUNNING")
    give_token(app, trial_id, f"token-{trial_id}")
    spec = TrialSpec(
        trial_id=trial_id, experiment_id=experiment_id, request_id="r", trial_seed=1, config=config
    )
    workdir = tmp_path / f"trial-{trial_id}"
    write_trial_files(spec, workdir)
    env = trial_environment(spec, master_url=url, token=f"token-{trial_id}", workdir=workdir)
    for name, value in env.items():
        if name.startswith("DET_"):
            mp.setenv(name, value)
    return trial_id


def test_through_the_master_each_rank_adds_its_folder_and_no_other_user_can(
    people: People,  # noqa: F811
    s3_store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with served(people) as url:
        alices = _become_trial(people, "alice", s3_store, url, tmp_path, monkeypatch)
        with core.init() as ctx:
            for rank in (0, 1):
                with ctx.checkpoint._store_files(OUTPUT, f"rank_{rank}") as path:
                    _write(path, {"predictions.txt": f"rank {rank}"})
            assert ctx.checkpoint._files_location(OUTPUT) == f"s3://platform/p/{OUTPUT}/"
        assert s3_store.objects() == {
            f"p/{OUTPUT}/rank_0/predictions.txt": b"rank 0",
            f"p/{OUTPUT}/rank_1/predictions.txt": b"rank 1",
        }
        assert people.trial(alices).latest_checkpoint is None  # nothing registered

        _become_trial(people, "bob", s3_store, url, tmp_path, monkeypatch)
        with core.init() as ctx:
            with pytest.raises(DetError, match=f"may not write checkpoint {OUTPUT}"):
                with ctx.checkpoint._store_files(OUTPUT, "rank_0") as path:
                    _write(path, {"predictions.txt": "overwritten"})
        assert s3_store.objects()[f"p/{OUTPUT}/rank_0/predictions.txt"] == b"rank 0"
