"""Saving and restoring checkpoints: files in checkpoint storage, registered once complete."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from det_airflow.core._backend import Backend
from det_airflow.core._distributed import DistributedContext
from det_airflow.core._jsonable import jsonable
from det_airflow.core._storage import CheckpointStorage, resources_of
from det_airflow.core._train import TrainContext
from det_airflow.errors import DetError

METADATA_FILE = "metadata.json"


class CheckpointContext:
    """Checkpoints of a trial, identified by their ``storage_id`` (a uuid).

    A checkpoint is written into a local folder, moved into storage whole (renamed into place in a
    folder storage, uploaded to a bucket), and only then registered with the master; a crash
    midway leaves nothing registered. Saving is the chief's job; every worker may restore.
    """

    def __init__(
        self,
        distributed: DistributedContext,
        storage: CheckpointStorage | None,
        backend: Backend,
        train: TrainContext,
    ) -> None:
        self._dist = distributed
        self._storage_or_none = storage
        self._backend = backend
        self._train = train

    @property
    def _storage(self) -> CheckpointStorage:
        # Checked on use, not at init: a trial that never checkpoints needs no storage.
        if self._storage_or_none is None:
            raise DetError(
                "the experiment config has no checkpoint_storage; set one (shared_fs, directory or s3)"
            )
        return self._storage_or_none

    @contextlib.contextmanager
    def store_path(self, metadata: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        """Yield ``(path, storage_id)``: write the checkpoint's files under ``path``.

        ``metadata`` must hold ``steps_completed`` (batches trained); it is saved as
        ``metadata.json`` beside the files and registered with the checkpoint. Chief only.

        Example::

            with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, uuid):
                torch.save(model.state_dict(), path / "model.pt")
        """
        if not self._dist.is_chief:
            raise DetError("checkpoint.store_path is for the chief (rank 0) only")
        clean, steps_completed = _check_metadata(metadata)
        import uuid  # on use, as shutil below: this module is on every trial's start

        storage_id = str(uuid.uuid4())
        with self._storage.writing(storage_id) as path:
            yield path, storage_id
            (path / METADATA_FILE).write_text(json.dumps(clean, indent=2, sort_keys=True), encoding="utf-8")
            resources = resources_of(path)
        # Metrics up to this checkpoint reach the master before it does.
        self._train.flush()
        self._backend.register_checkpoint(
            storage_id, steps_completed, clean, resources, self._storage.describe(storage_id)
        )

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        """Yield a folder holding checkpoint ``storage_id``'s files (read them, do not change them).

        Folder storage yields the checkpoint's own folder; object storage downloads the files into a
        temporary folder, removed when the block ends.
        """
        with self._locate(storage_id).local_path(storage_id) as path:
            yield path

    def upload(self, ckpt_dir: Path | str | None, metadata: Mapping[str, Any] | None = None) -> str:
        """Copy a folder into a new checkpoint; answers its storage_id.

        Every worker calls it (the chief copies, the others may pass ``ckpt_dir=None``); all get the id.
        """
        storage_id = None
        if self._dist.is_chief:
            if ckpt_dir is None or not Path(ckpt_dir).is_dir():
                raise DetError(f"checkpoint.upload: {ckpt_dir} is not a folder")
            with self.store_path(metadata or {}) as (path, storage_id):
                import shutil

                shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
        return str(self._dist.broadcast(storage_id))

    def download(self, storage_id: str, ckpt_dir: Path | str) -> None:
        """Copy checkpoint ``storage_id``'s files into ``ckpt_dir``."""
        self._locate(storage_id).download(storage_id, Path(ckpt_dir))

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata a checkpoint was saved with."""
        with contextlib.suppress(DetError):
            storage = self._locate(storage_id)
            with contextlib.closing(storage.open_file(storage_id, METADATA_FILE)) as stream:
                return dict(json.loads(stream.read()))
        record = self._backend.get_checkpoint(storage_id)
        if record is None:
            raise DetError(f"checkpoint {storage_id} not found")
        return dict(record.get("metadata") or {})

    def delete(self, storage_id: str) -> None:
        """Delete a checkpoint's files and tell the master. Chief only."""
        if not self._dist.is_chief:
            raise DetError("checkpoint.delete is for the chief (rank 0) only")
        self._storage.delete(storage_id)
        self._backend.delete_checkpoint(storage_id)

    def _locate(self, storage_id: str) -> CheckpointStorage:
        """The storage holding the checkpoint's files: the configured one, else the one its
        registered record names (saved under another storage setting)."""
        storage = self._storage
        if storage.exists(storage_id):
            return storage
        record = self._backend.get_checkpoint(storage_id)
        recorded = CheckpointStorage.from_record((record or {}).get("storage") or {}, storage_id, storage)
        if recorded is None or recorded.location(storage_id) == storage.location(storage_id):
            raise storage.missing(storage_id)
        if recorded.exists(storage_id):
            return recorded
        raise storage.missing(storage_id, recorded.location(storage_id))


def _check_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    if not isinstance(metadata, Mapping) or "steps_completed" not in metadata:
        raise DetError(
            "checkpoint metadata must include 'steps_completed' (the batches trained so far), "
            "e.g. store_path({'steps_completed': 1000})"
        )
    steps = metadata["steps_completed"]
    try:
        steps_completed = int(steps)
    except (TypeError, ValueError):
        steps_completed = -1
    if steps_completed < 0 or isinstance(steps, bool):
        raise DetError(f"checkpoint metadata steps_completed: expected an integer >= 0, got {steps!r}")
    clean = jsonable(dict(metadata), where="checkpoint metadata")
    clean["steps_completed"] = steps_completed
    return clean, steps_completed
