"""Saving and restoring checkpoints: files in checkpoint storage, registered once complete."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from det_airflow.core._backend import Backend
from det_airflow.core._distributed import DistributedContext
from det_airflow.core._jsonable import jsonable
from det_airflow.core._objects import temporary_folder
from det_airflow.core._storage import CheckpointStorage, FolderStorage, checked_relative, resources_of
from det_airflow.core._train import TrainContext
from det_airflow.errors import DetError

METADATA_FILE = "metadata.json"

Selector = Callable[[str], bool]


class DownloadMode(enum.Enum):
    """How workers restore a checkpoint: ``LocalWorkersShareDownload`` (default) has each node's
    local chief fetch the files once for all its workers, so every worker must call in step;
    ``NoSharedDownload`` has each caller fetch on its own, with no coordination."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


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

    def store_path(
        self, metadata: Mapping[str, Any] | None = None, *, shard: bool = False
    ) -> contextlib.AbstractContextManager[tuple[Path, str]]:
        """Yield ``(path, storage_id)``: write the checkpoint's files under ``path``.

        ``metadata`` must hold ``steps_completed`` (batches trained); it is saved as
        ``metadata.json`` beside the files and registered with the checkpoint. Chief only, unless
        ``shard=True``: then every worker calls it in step and writes its own files under its own
        ``path`` (the same ``storage_id``); the checkpoint is their union, registered by the chief
        once every worker is done. Two workers writing the same file name is an error, as is
        ``metadata`` whose keys differ between workers (nested mappings are merged).

        Example::

            with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, uuid):
                torch.save(model.state_dict(), path / "model.pt")
        """
        if shard:
            return self._store_path_sharded(metadata or {})
        if not self._dist.is_chief:
            raise DetError("checkpoint.store_path is for the chief (rank 0) only (or pass shard=True)")
        return self._store_path_single(metadata or {})

    @contextlib.contextmanager
    def _store_path_single(self, metadata: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        clean, steps_completed = _check_metadata(metadata)
        storage_id = _new_uuid()
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
    def _store_path_sharded(self, metadata: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        dist = self._dist
        storage = self._storage
        storage_id = str(dist.broadcast(_new_uuid() if dist.is_chief else None))
        failure: BaseException | None = None
        with contextlib.ExitStack() as stack:
            # The chief writes straight into the checkpoint being stored; the others stage their
            # files where moving them in is cheap: beside it for a folder, else a temporary folder.
            if dist.is_chief:
                path = stack.enter_context(storage.writing(storage_id))
            elif isinstance(storage, FolderStorage):
                storage.base.mkdir(parents=True, exist_ok=True)
                path = Path(stack.enter_context(_tempdir(storage.base, f".{storage_id}.rank{dist.rank}-")))
            else:
                path = stack.enter_context(temporary_folder(storage_id))
            try:
                yield path, storage_id
            except BaseException as exc:
                failure = exc
            resources = resources_of(path) if failure is None else {}
            outcomes = dist.allgather((None if failure is None else repr(failure), resources, dict(metadata)))
            _raise_for_shards(outcomes, failure)
            merged, conflicts = _merge_metadata([meta for _, _, meta in outcomes])
            if conflicts:
                raise DetError("checkpoint.store_path(shard=True): workers disagree on metadata " + conflicts)
            clean, steps_completed = _check_metadata(merged)
            target = dist.broadcast(str(path) if dist.is_chief else None)
            error = None
            if not dist.is_chief and resources:
                try:
                    self._add_shard(storage, storage_id, path, Path(target))
                except Exception as exc:
                    error = f"rank {dist.rank}: {exc}"
            errors = [e for e in dist.allgather(error) if e]
            if errors:
                raise DetError("checkpoint.store_path(shard=True): " + "; ".join(errors))
            all_resources: dict[str, int] = {}
            if dist.is_chief:
                meta_file = path / METADATA_FILE
                meta_file.write_text(json.dumps(clean, indent=2, sort_keys=True), encoding="utf-8")
                all_resources[METADATA_FILE] = meta_file.stat().st_size
        if dist.is_chief:
            for _, rank_resources, _ in outcomes:
                all_resources.update(rank_resources)
            self._train.flush()
            self._backend.register_checkpoint(
                storage_id, steps_completed, clean, all_resources, storage.describe(storage_id)
            )
        dist.allgather(None)  # every worker returns once the checkpoint is registered

    @staticmethod
    def _add_shard(storage: CheckpointStorage, storage_id: str, staged: Path, target: Path) -> None:
        """Put a worker's staged files into the checkpoint the chief is storing."""
        if isinstance(storage, FolderStorage):
            for relative in resources_of(staged):
                dest = target / relative
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged / relative, dest)
        else:
            storage._upload(storage_id, staged)  # type: ignore[attr-defined]

    def _store_files(self, uuid: str, folder: str) -> contextlib.AbstractContextManager[Path]:
        """A folder whose files join ``<uuid>/<folder>/`` of the checkpoint storage when the block
        ends, registering nothing (Determined's ``_storage_manager.store_path(dst)``): the output
        of a batch inference, beside the checkpoints. Any worker may call it, on its own."""
        return self._storage.adding(uuid, folder)

    def _files_location(self, uuid: str) -> str:
        """Where ``_store_files(uuid, ...)`` puts its files, for people."""
        return self._storage.location(uuid)

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode | str | None = None,
        *,
        selector: Selector | None = None,
    ) -> Iterator[Path]:
        """Yield a folder holding checkpoint ``storage_id``'s files (read them, do not change them).

        Folder storage yields the checkpoint's own folder; object storage downloads the files (those
        ``selector``, given each file's relative path, keeps) into a temporary folder, removed when
        the block ends. With ``LocalWorkersShareDownload`` every worker calls it in step and each
        node's local chief fetches once for the node. Without a mode each caller fetches on its own,
        as ``NoSharedDownload``: code that restores on the chief alone (Determined's default would
        wait for the other workers there) and code where every worker calls it both work.
        """
        if download_mode is None or DownloadMode(download_mode) == DownloadMode.NoSharedDownload:
            with self._local_copy(storage_id, selector) as path:
                yield path
            return
        selector = self._shared_selector(storage_id, selector)
        dist = self._dist
        if dist.is_local_chief:
            try:
                with self._local_copy(storage_id, selector) as path:
                    dist.broadcast_local((str(path), None))
                    try:
                        yield path
                    finally:
                        dist.gather_local(None)  # the folder stays until every local worker is done
            except DetError as exc:
                dist.broadcast_local((None, str(exc)))
                raise
        else:
            where, error = dist.broadcast_local(None)
            if error is not None:
                raise DetError(error)
            try:
                yield Path(where)
            finally:
                dist.gather_local(None)

    def upload(
        self,
        ckpt_dir: Path | str | None,
        metadata: Mapping[str, Any] | None = None,
        *,
        shard: bool = False,
    ) -> str:
        """Copy a folder into a new checkpoint; answers its storage_id.

        Every worker calls it (the chief copies, the others may pass ``ckpt_dir=None``); all get the
        id. With ``shard=True`` every worker's folder is copied in (a folder that several workers of
        a node pass is copied once); two workers with the same file name is an error.
        """
        if ckpt_dir is not None and not Path(ckpt_dir).is_dir():
            raise DetError(f"checkpoint.upload: {ckpt_dir} is not a folder")
        if shard:
            if not any(self._dist.allgather(ckpt_dir is not None)):
                raise DetError("checkpoint.upload(shard=True): no worker passed a folder to upload")
            ident = None
            if ckpt_dir is not None:
                st = os.stat(ckpt_dir)
                ident = (st.st_dev, st.st_ino)
            idents = self._dist.allgather(ident)
            copies = ident is not None and idents.index(ident) == self._dist.rank
            with self.store_path(metadata or {}, shard=True) as (path, sharded_id):
                if copies:
                    shutil.copytree(str(ckpt_dir), path, dirs_exist_ok=True)
            return sharded_id
        storage_id = None
        if self._dist.is_chief:
            if ckpt_dir is None:
                raise DetError("checkpoint.upload: None is not a folder")
            with self.store_path(metadata or {}) as (path, chief_id):
                shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
            storage_id = chief_id
        return str(self._dist.broadcast(storage_id))

    def download(
        self,
        storage_id: str,
        ckpt_dir: Path | str,
        download_mode: DownloadMode | str | None = None,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy checkpoint ``storage_id``'s files (those ``selector`` keeps, given each file's path
        relative to the checkpoint) into ``ckpt_dir``. With ``LocalWorkersShareDownload`` every
        worker calls it in step and each node's local chief copies the files any of its workers
        selects, once; without a mode each caller copies on its own (see ``restore_path``)."""
        if download_mode is None or DownloadMode(download_mode) == DownloadMode.NoSharedDownload:
            self._download(storage_id, Path(ckpt_dir), selector)
            return
        selector = self._shared_selector(storage_id, selector)
        error = None
        if self._dist.is_local_chief:
            try:
                self._download(storage_id, Path(ckpt_dir), selector)
            except DetError as exc:
                error = str(exc)
        error = self._dist.broadcast_local(error)
        if error is not None:
            raise DetError(error)

    def _shared_selector(self, storage_id: str, selector: Selector | None) -> Selector | None:
        """A selector for the local chief that keeps a file when any worker of the node keeps it
        (functions do not travel: the file names do, once, and the answers come back)."""
        dist = self._dist
        if dist.local_size == 1 or not any(dist.allgather_local(selector is not None)):
            return selector
        names = None
        if dist.is_local_chief:
            with contextlib.suppress(DetError):
                names = sorted(self._locate(storage_id).files(storage_id))
        names = dist.broadcast_local(names) or []
        kept = {name for name in names if selector is None or selector(name)}
        everyone = dist.gather_local(kept)
        wanted = set().union(*everyone) if everyone is not None else kept
        return wanted.__contains__

    def _download(self, storage_id: str, dest: Path, selector: Selector | None) -> None:
        storage = self._locate(storage_id)
        if selector is None:
            storage.download(storage_id, dest)
            return
        for relative in storage.files(storage_id):
            if selector(relative):
                target = dest / checked_relative(relative)
                target.parent.mkdir(parents=True, exist_ok=True)
                with (
                    contextlib.closing(storage.open_file(storage_id, relative)) as src,
                    target.open("wb") as out,
                ):
                    shutil.copyfileobj(src, out)

    @contextlib.contextmanager
    def _local_copy(self, storage_id: str, selector: Selector | None) -> Iterator[Path]:
        storage = self._locate(storage_id)
        if selector is None or isinstance(storage, FolderStorage):
            with storage.local_path(storage_id) as path:
                yield path
            return
        with temporary_folder(storage_id) as folder:
            self._download(storage_id, folder, selector)
            yield folder

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


def _new_uuid() -> str:
    import uuid  # on use: this module is on every trial's start

    return str(uuid.uuid4())


@contextlib.contextmanager
def _tempdir(parent: Path, prefix: str) -> Iterator[str]:
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _raise_for_shards(
    outcomes: list[tuple[str | None, dict[str, int], Any]], failure: BaseException | None
) -> None:
    """Every worker stops the same way: a worker's own failure is re-raised, the others learn of it,
    and files written by two workers are refused."""
    failed = [f"rank {rank}: {error}" for rank, (error, _, _) in enumerate(outcomes) if error]
    if failure is not None:
        raise failure
    if failed:
        raise DetError("checkpoint.store_path(shard=True): another worker failed: " + "; ".join(failed))
    owners: dict[str, list[int]] = {}
    for rank, (_, resources, _) in enumerate(outcomes):
        for name in resources:
            owners.setdefault(name, []).append(rank)
    clashes = {name: ranks for name, ranks in sorted(owners.items()) if len(ranks) > 1}
    if clashes:
        listed = ", ".join(f"{name} (ranks {', '.join(map(str, ranks))})" for name, ranks in clashes.items())
        raise DetError(f"checkpoint.store_path(shard=True): several workers wrote the same files: {listed}")


def _merge_metadata(all_metadata: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The workers' metadata merged (mappings under the same key merge); the conflicting keys."""
    conflicts: list[str] = []

    def merge(into: dict[str, Any], other: Mapping[str, Any], where: str) -> None:
        for key, value in other.items():
            if key not in into:
                into[key] = value
            elif isinstance(into[key], Mapping) and isinstance(value, Mapping):
                into[key] = dict(into[key])
                merge(into[key], value, f"{where}{key}/")
            elif into[key] != value:
                conflicts.append(f"{where}{key}")

    merged: dict[str, Any] = {}
    for metadata in all_metadata:
        merge(merged, metadata, "")
    return merged, ", ".join(conflicts)


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
