"""CheckpointStorage from the config: the exact refusals, and the type each setting records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from det_airflow import core
from det_airflow.core import CheckpointStorage
from det_airflow.core._local import read_jsonl
from det_airflow.errors import DetError


@pytest.mark.parametrize(
    "storage, message",
    [
        ({"type": "shared_fs"}, "checkpoint_storage.host_path: required for type shared_fs"),
        ({"type": "shared_fs", "host_path": ""}, "checkpoint_storage.host_path: required for type shared_fs"),
        ({"type": "directory"}, "checkpoint_storage.container_path: required for type directory"),
        ({"type": "gcs"}, "checkpoint_storage.bucket: required for type gcs"),
        ({"type": "azure"}, "checkpoint_storage.container: required for type azure"),
        (
            {"type": "nfs"},
            "checkpoint_storage.type: expected shared_fs, directory, s3, gcs or azure, got 'nfs'",
        ),
        ({}, "checkpoint_storage.type: expected shared_fs, directory, s3, gcs or azure, got None"),
    ],
)
def test_a_bad_checkpoint_storage_is_refused_word_for_word(storage: dict[str, Any], message: str) -> None:
    with pytest.raises(DetError) as raised:
        CheckpointStorage.from_config(storage)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "storage, kind",
    [
        ({"type": "directory", "container_path": "/ckpt"}, "directory"),
        ({"type": "shared_fs", "host_path": "/mnt", "storage_path": "ck"}, "shared_fs"),
        ("/plain/folder", "shared_fs"),
    ],
)
def test_each_setting_describes_its_checkpoints_with_its_type(storage: Any, kind: str) -> None:
    described = CheckpointStorage.from_config(storage).describe("u1")
    assert described["type"] == kind
    assert described["path"].endswith("u1")


def test_a_plain_storage_folder_is_shared_fs(tmp_path: Path) -> None:
    assert CheckpointStorage(tmp_path).describe("u1") == {"type": "shared_fs", "path": str(tmp_path / "u1")}


def test_a_checkpoint_saved_to_a_folder_argument_is_recorded_as_shared_fs(tmp_path: Path) -> None:
    with core.init(checkpoint_storage=str(tmp_path / "ck")) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (_, storage_id):
            pass
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["storage"] == {"type": "shared_fs", "path": str(tmp_path / "ck" / storage_id)}


def test_deleting_a_checkpoint_whose_files_are_gone_still_records_the_deletion(tmp_path: Path) -> None:
    with core.init() as ctx:
        ctx.checkpoint.delete("0000-gone")
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert (record["uuid"], record["state"]) == ("0000-gone", "DELETED")
