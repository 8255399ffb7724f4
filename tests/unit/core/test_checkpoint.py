"""CheckpointContext: files in storage, metadata.json beside them, registered once complete."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from det_airflow import core
from det_airflow.errors import DetError

from .conftest import FakeRuntime


def test_store_path_writes_then_registers(
    remote_init: Callable, fake_runtime: FakeRuntime, tmp_path: Path
) -> None:
    with remote_init() as ctx:
        ctx.train.report_training_metrics(10, {"loss": 0.5})
        with ctx.checkpoint.store_path({"steps_completed": 10, "framework": "torch"}) as (path, storage_id):
            (path / "model.pt").write_bytes(b"12345")
            assert fake_runtime.sent("POST", "/checkpoints") == []  # not before the files are complete
            assert not (tmp_path / "shared" / "ckpts" / storage_id).exists()
    final = tmp_path / "shared" / "ckpts" / storage_id
    assert (final / "model.pt").read_bytes() == b"12345"
    assert json.loads((final / "metadata.json").read_text()) == {"steps_completed": 10, "framework": "torch"}
    [registered] = fake_runtime.sent("POST", "/checkpoints")
    body = registered.body
    assert body["uuid"] == storage_id and body["steps_completed"] == 10
    assert body["metadata"] == {"steps_completed": 10, "framework": "torch"}
    assert body["resources"] == {"model.pt": 5, "metadata.json": (final / "metadata.json").stat().st_size}
    # The metrics up to the checkpoint were sent before it.
    paths = [r.path for r in fake_runtime.requests if r.method == "POST"]
    assert paths.index("/runtime/trials/7/metrics") < paths.index("/runtime/trials/7/checkpoints")


def test_a_failure_while_writing_registers_nothing(
    remote_init: Callable, fake_runtime: FakeRuntime, tmp_path: Path
) -> None:
    with remote_init() as ctx, pytest.raises(OSError):
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "half.pt").write_bytes(b"x")
            raise OSError("disk full")
    assert fake_runtime.sent("POST", "/checkpoints") == []
    assert list((tmp_path / "shared" / "ckpts").iterdir()) == []


@pytest.mark.parametrize("metadata", [{}, {"steps": 3}, {"steps_completed": -1}, {"steps_completed": "x"}])
def test_metadata_must_hold_steps_completed(metadata: dict) -> None:
    with core.init() as ctx, pytest.raises(DetError, match="steps_completed"):
        with ctx.checkpoint.store_path(metadata):
            pass


def test_restore_download_metadata_and_delete(
    remote_init: Callable, fake_runtime: FakeRuntime, tmp_path: Path
) -> None:
    with remote_init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 4}) as (path, storage_id):
            (path / "w.txt").write_text("weights")
        with ctx.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "w.txt").read_text() == "weights"
        ctx.checkpoint.download(storage_id, tmp_path / "copy")
        assert (tmp_path / "copy" / "w.txt").read_text() == "weights"
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 4}
        ctx.checkpoint.delete(storage_id)
        assert not (tmp_path / "shared" / "ckpts" / storage_id).exists()
    assert [r.path for r in fake_runtime.sent("DELETE", storage_id)] == [f"/runtime/checkpoints/{storage_id}"]


def test_upload_copies_a_folder_into_a_new_checkpoint(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.bin").write_bytes(b"abc")
    with core.init() as ctx:
        storage_id = ctx.checkpoint.upload(src, {"steps_completed": 2})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "sub" / "a.bin").read_bytes() == b"abc"


def test_restoring_an_unknown_checkpoint_says_where_it_looked(remote_init: Callable, tmp_path: Path) -> None:
    with remote_init() as ctx, pytest.raises(DetError, match="checkpoint nope: its files are not at"):
        with ctx.checkpoint.restore_path("nope"):
            pass


def test_restore_falls_back_to_the_registered_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    with core.init(checkpoint_storage=str(elsewhere)) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "w").write_text("1")
    with core.init() as ctx:  # the default local storage does not hold it; the store's index does
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert path == elsewhere / storage_id
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 1}


def test_a_trial_without_checkpoint_storage_fails_only_when_it_checkpoints(
    remote_init: Callable,
) -> None:
    with remote_init(checkpoint_storage=None) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        with pytest.raises(DetError, match="no checkpoint_storage"):
            with ctx.checkpoint.store_path({"steps_completed": 1}):
                pass


def test_cloud_storage_without_its_bucket_is_a_clear_error(remote_init: Callable) -> None:
    with pytest.raises(DetError, match="checkpoint_storage.bucket: required for type gcs"):
        remote_init(checkpoint_storage={"type": "gcs"})
