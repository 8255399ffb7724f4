"""Checkpoint storage from the config; files appear under their uuid only once complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_airflow.core import CheckpointStorage
from det_airflow.core._storage import resources_of
from det_airflow.errors import DetError


def test_shared_fs_is_host_path_then_storage_path(tmp_path: Path) -> None:
    storage = CheckpointStorage.from_config(
        {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ck"}
    )
    assert storage.path("u1") == tmp_path / "ck" / "u1"
    assert storage.describe("u1") == {"type": "shared_fs", "path": str(tmp_path / "ck" / "u1")}


def test_shared_fs_without_storage_path_is_host_path(tmp_path: Path) -> None:
    storage = CheckpointStorage.from_config({"type": "shared_fs", "host_path": str(tmp_path)})
    assert storage.path("u1") == tmp_path / "u1"


def test_directory_is_container_path(tmp_path: Path) -> None:
    storage = CheckpointStorage.from_config({"type": "directory", "container_path": str(tmp_path / "c")})
    assert storage.path("u1") == tmp_path / "c" / "u1"


@pytest.mark.parametrize(
    "section, location",
    [
        ({"type": "gcs", "bucket": "b", "prefix": "p"}, "gs://b/p/u1/"),
        ({"type": "azure", "container": "c", "connection_string": "UseDevelopmentStorage=true"}, "/c/u1/"),
    ],
)
def test_gcs_and_azure_storage_name_where_a_checkpoint_lives(section: dict[str, str], location: str) -> None:
    assert CheckpointStorage.from_config(section).location("u1").endswith(location)


def test_missing_paths_are_named() -> None:
    with pytest.raises(DetError, match="checkpoint_storage.host_path: required"):
        CheckpointStorage.from_config({"type": "shared_fs"})
    with pytest.raises(DetError, match="checkpoint_storage.container_path: required"):
        CheckpointStorage.from_config({"type": "directory"})


def test_files_are_written_beside_and_renamed_into_place(tmp_path: Path) -> None:
    storage = CheckpointStorage(tmp_path)
    with storage.writing("u1") as partial:
        assert partial.parent == tmp_path and partial.name != "u1"
        (partial / "sub").mkdir()
        (partial / "sub" / "w.bin").write_bytes(b"1234")
        assert not storage.path("u1").exists()  # nothing visible until complete
    assert (tmp_path / "u1" / "sub" / "w.bin").read_bytes() == b"1234"
    assert resources_of(tmp_path / "u1") == {"sub/w.bin": 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u1"]


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    storage = CheckpointStorage(tmp_path)
    with pytest.raises(RuntimeError), storage.writing("u1") as partial:
        (partial / "w.bin").write_bytes(b"x")
        raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []
