"""Checkpoint storage: where a checkpoint's files live, and writing them so none is seen half-done."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from det_airflow.errors import DetError

# shutil is imported where it is used: every trial imports this module at start, few delete a
# checkpoint, and a trial's start is on the clock of every trial.
_CLOUD_TYPES = ("s3", "gcs", "azure")


class CheckpointStorage:
    """A folder holding one sub-folder per checkpoint, named by its uuid."""

    def __init__(self, base: Path | str, *, type: str = "shared_fs") -> None:
        self.base = Path(base).expanduser().absolute()
        self.type = type

    @classmethod
    def from_config(cls, storage: Mapping[str, Any] | str) -> CheckpointStorage:
        """From the experiment config's ``checkpoint_storage`` (or a plain directory path)."""
        if isinstance(storage, str | os.PathLike):
            return cls(storage)
        kind = storage.get("type")
        if kind == "shared_fs":
            host_path = storage.get("host_path")
            if not host_path:
                raise DetError("checkpoint_storage.host_path: required for type shared_fs")
            # An absolute storage_path replaces host_path, as os.path.join does.
            return cls(Path(host_path) / (storage.get("storage_path") or ""), type="shared_fs")
        if kind == "directory":
            container_path = storage.get("container_path")
            if not container_path:
                raise DetError("checkpoint_storage.container_path: required for type directory")
            return cls(container_path, type="directory")
        if kind in _CLOUD_TYPES:
            raise DetError(
                f"checkpoint_storage type {kind!r} is not supported yet by det-airflow; "
                "use shared_fs or directory"
            )
        raise DetError(f"checkpoint_storage.type: expected shared_fs or directory, got {kind!r}")

    def path(self, uuid: str) -> Path:
        return self.base / uuid

    def describe(self, uuid: str) -> dict[str, str]:
        return {"type": self.type, "path": str(self.path(uuid))}

    @contextlib.contextmanager
    def writing(self, uuid: str) -> Iterator[Path]:
        """A temporary folder beside the checkpoint's; renamed into place if the block succeeds."""
        target = self.path(uuid)
        if target.exists():
            raise DetError(f"checkpoint {uuid} already exists at {target}")
        self.base.mkdir(parents=True, exist_ok=True)
        partial = self.base / f".{uuid}.partial-{os.urandom(4).hex()}"
        partial.mkdir(mode=0o700)  # the owner's alone, also in a shared checkpoint root
        try:
            yield partial
            os.rename(partial, target)
        finally:
            if partial.exists():
                import shutil

                shutil.rmtree(partial, ignore_errors=True)

    def delete(self, uuid: str) -> None:
        import shutil

        shutil.rmtree(self.path(uuid), ignore_errors=True)


def resources_of(folder: Path) -> dict[str, int]:
    """``{relative path: size in bytes}`` of every file under ``folder``."""
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
