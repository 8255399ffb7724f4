"""Checkpoint storage: where a checkpoint's files live, and writing them so none is seen half-done.

``CheckpointStorage`` is the interface; ``from_config`` builds the kind the experiment config names:
a folder (``shared_fs``, ``directory``) here, or an object store (``det_airflow.core._objects``): an
S3 bucket (``_s3``), a Google Cloud Storage bucket (``_gcs``) or an Azure Blob Storage container
(``_azure``).
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from det_airflow.errors import DetError

# shutil is imported where it is used: every trial imports this module at start, few delete a
# checkpoint, and a trial's start is on the clock of every trial.


class CheckpointFilesMissing(DetError):
    """A checkpoint has no files where its storage keeps them."""


class CheckpointStorage(abc.ABC):
    """Where checkpoints' files live: one set of files per checkpoint, named by its uuid.

    ``CheckpointStorage(folder)`` builds a ``FolderStorage``, as ``pathlib.Path(...)`` builds a
    ``PosixPath``; ``CheckpointStorage.from_config(section)`` builds the kind a config names.
    """

    type: str

    def __new__(cls, *args: Any, **kwargs: Any) -> CheckpointStorage:
        return super().__new__(FolderStorage if cls is CheckpointStorage else cls)

    @classmethod
    def from_config(cls, storage: Mapping[str, Any] | str | os.PathLike[str]) -> CheckpointStorage:
        """From the experiment config's ``checkpoint_storage`` (or a plain directory path)."""
        if isinstance(storage, str | os.PathLike):
            return FolderStorage(storage)
        kind = storage.get("type")
        if kind in ("shared_fs", "directory"):
            return FolderStorage.from_config(storage)
        store = _object_store(kind)
        if store is not None:
            return store.from_config(storage)
        raise DetError(
            f"checkpoint_storage.type: expected shared_fs, directory, s3, gcs or azure, got {kind!r}"
        )

    @classmethod
    def from_record(
        cls, described: Mapping[str, Any], uuid: str, like: CheckpointStorage | None = None
    ) -> CheckpointStorage | None:
        """The storage that a registered checkpoint's ``storage`` record (see ``describe``) names;
        None when it names none. An object store's record gets ``like``'s credentials when on the
        same store."""
        store = _object_store(described.get("type"))
        if store is not None:
            return store.from_record(described, uuid, like)
        path = described.get("path")
        if not isinstance(path, str) or Path(path).name != uuid:
            return None
        return FolderStorage(Path(path).parent, type=str(described.get("type") or "shared_fs"))

    @abc.abstractmethod
    def describe(self, uuid: str) -> dict[str, str]:
        """Where checkpoint ``uuid`` lives, as registered with the master (never credentials)."""

    @abc.abstractmethod
    def location(self, uuid: str) -> str:
        """Where checkpoint ``uuid`` lives, for people: a folder or an ``s3://`` address."""

    @abc.abstractmethod
    def writing(self, uuid: str) -> contextlib.AbstractContextManager[Path]:
        """A local folder to write checkpoint ``uuid`` into; stored whole if the block succeeds,
        and nothing of it is left if it fails."""

    @abc.abstractmethod
    def local_path(self, uuid: str) -> contextlib.AbstractContextManager[Path]:
        """A local folder holding checkpoint ``uuid``'s files, for the block's duration."""

    @abc.abstractmethod
    def adding(self, uuid: str, folder: str) -> contextlib.AbstractContextManager[Path]:
        """A local folder whose files join ``<uuid>/<folder>/`` here when the block succeeds: files
        already there stay, one of the same name is replaced. Nothing is registered: these are
        files beside the checkpoints (a batch inference's output), not a checkpoint."""

    @abc.abstractmethod
    def download(self, uuid: str, dest: Path) -> None:
        """Copy checkpoint ``uuid``'s files into ``dest``."""

    @abc.abstractmethod
    def delete(self, uuid: str) -> None:
        """Remove every file of checkpoint ``uuid``; nothing to remove is no error."""

    @abc.abstractmethod
    def exists(self, uuid: str) -> bool:
        """Whether checkpoint ``uuid`` has files here."""

    @abc.abstractmethod
    def files(self, uuid: str) -> dict[str, int]:
        """``{relative path: size in bytes}`` of checkpoint ``uuid``'s files (empty when none)."""

    @abc.abstractmethod
    def open_file(self, uuid: str, relative: str) -> IO[bytes]:
        """One of checkpoint ``uuid``'s files, opened for reading as a stream."""

    def missing(self, uuid: str, *elsewhere: str) -> CheckpointFilesMissing:
        """The error for a checkpoint with no files here (nor at the ``elsewhere`` locations)."""
        where = " or ".join((self.location(uuid), *elsewhere))
        return CheckpointFilesMissing(f"checkpoint {uuid}: its files are not at {where}")


class FolderStorage(CheckpointStorage):
    """A folder holding one sub-folder per checkpoint, named by its uuid."""

    def __init__(self, base: Path | str | os.PathLike[str], *, type: str = "shared_fs") -> None:
        self.base = Path(base).expanduser().absolute()
        self.type = type

    @classmethod
    def from_config(cls, storage: Mapping[str, Any] | str | os.PathLike[str]) -> FolderStorage:
        """From a ``shared_fs`` or ``directory`` section (or a plain directory path)."""
        if isinstance(storage, str | os.PathLike):
            return cls(storage)
        if storage.get("type") == "directory":
            container_path = storage.get("container_path")
            if not container_path:
                raise DetError("checkpoint_storage.container_path: required for type directory")
            return cls(container_path, type="directory")
        host_path = storage.get("host_path")
        if not host_path:
            raise DetError("checkpoint_storage.host_path: required for type shared_fs")
        # An absolute storage_path replaces host_path, as os.path.join does.
        return cls(Path(host_path) / (storage.get("storage_path") or ""), type="shared_fs")

    def path(self, uuid: str) -> Path:
        return self.base / uuid

    def describe(self, uuid: str) -> dict[str, str]:
        return {"type": self.type, "path": str(self.path(uuid))}

    def location(self, uuid: str) -> str:
        return str(self.path(uuid))

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

    @contextlib.contextmanager
    def local_path(self, uuid: str) -> Iterator[Path]:
        if not self.exists(uuid):
            raise self.missing(uuid)
        yield self.path(uuid)

    @contextlib.contextmanager
    def adding(self, uuid: str, folder: str) -> Iterator[Path]:
        """The folder itself, written in place as Determined's shared_fs does: what the block wrote
        before a failure stays."""
        relative = checked_relative(f"{uuid}/{folder}")
        self.base.mkdir(parents=True, exist_ok=True)
        target = self.base
        for part in relative.parts:
            target /= part
            # The owner's alone, as a checkpoint's folder is in a shared root.
            target.mkdir(mode=0o700, exist_ok=True)
        yield target

    def download(self, uuid: str, dest: Path) -> None:
        import shutil

        with self.local_path(uuid) as folder:
            shutil.copytree(folder, dest, dirs_exist_ok=True)

    def delete(self, uuid: str) -> None:
        import shutil

        shutil.rmtree(self.path(uuid), ignore_errors=True)

    def exists(self, uuid: str) -> bool:
        return self.path(uuid).is_dir()

    def files(self, uuid: str) -> dict[str, int]:
        return resources_of(self.path(uuid)) if self.exists(uuid) else {}

    def open_file(self, uuid: str, relative: str) -> IO[bytes]:
        path = self.path(uuid) / checked_relative(relative)
        try:
            return path.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise CheckpointFilesMissing(
                f"checkpoint {uuid}: no file {relative!r} at {path.parent}"
            ) from None


def _object_store(kind: Any) -> Any:
    """The class of object store ``kind`` names (imported now: few trials need one); None for others."""
    if kind == "s3":
        from det_airflow.core._s3 import S3Storage

        return S3Storage
    if kind == "gcs":
        from det_airflow.core._gcs import GCSStorage

        return GCSStorage
    if kind == "azure":
        from det_airflow.core._azure import AzureStorage

        return AzureStorage
    return None


def checked_relative(relative: str) -> PurePosixPath:
    """``relative`` as a path inside a checkpoint, by the rule the master stores file names by
    (``api._bounds.relative_file``: plain relative parts, bounded, no control characters)."""
    from det_airflow.api._bounds import relative_file

    try:
        return PurePosixPath(relative_file(relative))
    except ValueError as exc:
        raise DetError(
            f"checkpoint file {relative!r}: expected a relative path inside the checkpoint ({exc})"
        ) from None


def resources_of(folder: Path) -> dict[str, int]:
    """``{relative path: size in bytes}`` of every file under ``folder``."""
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
