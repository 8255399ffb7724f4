"""TensorBoard files of a trial: its metrics as event files, and the folder they live in synced to
the experiment's storage, as Determined does (``core.train.get_tensorboard_path()``,
``tensorboard_mode`` AUTO).

Every metric reported through ``core.train`` (numbers only) becomes a scalar ``<group>/<name>``
(``training/loss``, ``validation/accuracy``) at step ``steps_completed``, written with the
``tensorboard`` package's own writer (no TensorFlow needed); a trial without that package logs one
warning and trains on. The training code may write its own event files into the same folder.

Where the files are:

- on a trial: a fresh temporary folder on its host, synced to the experiment's
  ``checkpoint_storage`` under ``tensorboard/experiment/<experiment id>/trial/<trial id>/``
  (below a ``shared_fs`` storage's ``host_path``/``storage_path``, or an object store's
  bucket/container and ``prefix``): by a background thread at most once every
  ``SYNC_INTERVAL`` seconds after a report, and once more when the context closes; only new or
  changed files are sent, and a failure is a warning, never the end of training;
- off-cluster (and ``det experiment create --local``): the local store's ``tensorboard/experiment/
  <e>/trial/<t>/`` (ids 0 without a trial), written in place and synced nowhere: ``tensorboard
  --logdir .det_local/tensorboard`` reads it.

``DET_TENSORBOARD=off`` in the environment writes no metrics (the folder is still handed out and
synced); ``core.init(tensorboard_mode="MANUAL")`` does the same for one context, as in Determined.

Beside the trial's side, the side that serves TensorBoard reads a trial's files with
:func:`tensorboard_prefix`, :func:`local_tensorboard_dir` and :func:`fetch_tensorboard`.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import enum
import json
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from det_airflow.core._jsonable import as_float
from det_airflow.core._objects import ObjectStorage
from det_airflow.core._storage import CheckpointStorage, FolderStorage, checked_relative
from det_airflow.core._through_master import ThroughMasterStorage, through_master
from det_airflow.errors import DetError

logger = logging.getLogger("det_airflow.core")

# "off" writes no metrics as events; the comparison of harness_overhead.py turns it on and off.
ENV_VARIABLE = "DET_TENSORBOARD"
# The least time between two syncs of a trial's folder (and flushes of its event file).
SYNC_INTERVAL = 5.0
# The least time between two hand-overs of queued reports to the event file's writer: the training
# thread only queues, and the reports of this long are written together.
WRITE_GAP = 0.2
# What fetch_tensorboard has copied into a destination: {relative path: the source's signature}.
FETCHED_FILE = ".det-tensorboard-fetched.json"


class TensorboardMode(enum.StrEnum):
    """Determined's ``core.init(tensorboard_mode=...)``: AUTO writes the reported metrics as events;
    MANUAL leaves the folder to the training code's own files."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


def tensorboard_prefix(experiment_id: int, trial_id: int) -> str:
    """Where a trial's TensorBoard files live, relative to its storage: ends in ``/``."""
    return f"tensorboard/experiment/{int(experiment_id)}/trial/{int(trial_id)}/"


def local_tensorboard_dir(storage: Mapping[str, Any], experiment_id: int, trial_id: int) -> Path | None:
    """The folder on this machine holding a trial's files, for a ``shared_fs`` (or ``directory``)
    storage, whether or not it exists yet; None for an object store."""
    store = CheckpointStorage.from_config(storage)
    if isinstance(store, FolderStorage):
        return store.base / tensorboard_prefix(experiment_id, trial_id)
    return None


def fetch_tensorboard(
    storage: Mapping[str, Any], experiment_id: int, trial_id: int, dest: Path, *, client: Any = None
) -> int:
    """Copy a trial's files that are new or changed since the last fetch into ``dest`` (keeping
    their relative paths); returns how many were copied, 0 when the trial has none.

    A file counts as changed when its size and modification time (a folder) or its etag (an object
    store) differ from what the last fetch into ``dest`` copied; ``dest`` keeps that record in a
    hidden file. With ``client`` (a trial's ``StorageClient``: a TensorBoard task), an object
    store whose section carries no credentials of its own is read through the master, as a trial
    reads its checkpoints; else its credentials come as for checkpoints (the section, then the
    environment). Raises :class:`DetError` when the storage cannot be read.
    """
    store: CheckpointStorage
    if client is not None and through_master(storage):
        store = ThroughMasterStorage(storage, client)
    else:
        store = CheckpointStorage.from_config(storage)
    place = _place(store, experiment_id, trial_id)
    listed = place.listing()
    if not listed:
        return 0
    dest = Path(dest)
    record_path = dest / FETCHED_FILE
    fetched = _read_record(record_path)
    copied = 0
    try:
        for relative, (size, signature) in sorted(listed.items()):
            target = dest / checked_relative(relative)
            if fetched.get(relative) == signature and _size(target) == size:
                continue
            with place.open(relative) as stream:
                if stream is None:  # removed since it was listed
                    continue
                _write_in_place(stream, target)
            fetched[relative] = signature
            copied += 1
    finally:
        if copied:
            _write_record(record_path, fetched)
    return copied


def tensorboard_scalars(mode: Any) -> bool:
    """Whether reported metrics are written as events: ``tensorboard_mode`` (None is AUTO) and
    ``DET_TENSORBOARD``, each checked."""
    if mode is None:
        chosen = TensorboardMode.AUTO
    else:
        text = str(getattr(mode, "value", mode)).upper()
        if text not in TensorboardMode.__members__:
            raise DetError(f"core.init(tensorboard_mode=...): expected AUTO or MANUAL, got {mode!r}")
        chosen = TensorboardMode(text)
    given = os.environ.get(ENV_VARIABLE, "")
    switch = given.strip().lower()
    if switch not in ("", "on", "off"):
        raise DetError(f"environment variable {ENV_VARIABLE}: expected on or off, got {given!r}")
    return chosen is TensorboardMode.AUTO and switch != "off"


class TensorBoardEvents:
    """A trial's TensorBoard folder: the reported metrics written into it as events, and the folder
    synced to a destination (none off-cluster).

    The training thread only queues what it reports; a background thread, started at the first
    report, writes the events and syncs, so a report costs the training loop a few microseconds.
    """

    def __init__(
        self,
        folder: Path | None = None,
        *,
        destination: _Place | None = None,
        write_scalars: bool = True,
        remove_when_synced: bool = False,
        temporary_prefix: str = "det-tensorboard-",
    ) -> None:
        """``folder`` None: a temporary folder named ``temporary_prefix...``, made on first use.
        ``remove_when_synced``: the folder is removed at close once all of it reached ``destination``."""
        self._folder = folder
        self._temporary_prefix = temporary_prefix
        self._folder_lock = threading.Lock()
        self._destination = destination
        self._write_scalars = write_scalars
        self._interval = SYNC_INTERVAL
        self._remove_when_synced = remove_when_synced
        self._pending: collections.deque[tuple[float, str, int, Mapping[str, Any]]] = collections.deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one writer of the event file and one sync at a time
        self._writer: Any = None
        self._synced: dict[str, tuple[int, int]] = {}
        self._failing: set[str] = set()
        self._closed = False

    @classmethod
    def on_trial(
        cls,
        storage: Mapping[str, Any] | None,
        *,
        experiment_id: int,
        trial_id: int,
        allocation_id: str,
        rank: int,
        write_scalars: bool,
        master: str | None = None,
        token: str | None = None,
    ) -> TensorBoardEvents:
        """A trial's: a temporary folder of this process, synced to the experiment's storage
        (``checkpoint_storage``) through a storage object of its own: the checkpoints' client is
        not shared with the background thread. ``master`` and ``token``: the trial's master and
        token, through which an object store without credentials of its own is reached."""
        prefix = f"det-tensorboard-{allocation_id}-{rank}-"
        if storage is None:
            logger.warning(
                "the experiment has no checkpoint_storage: its TensorBoard files stay in a temporary "
                "folder on this host (train.get_tensorboard_path())"
            )
            return cls(write_scalars=write_scalars, temporary_prefix=prefix)
        store: CheckpointStorage
        if master is not None and through_master(storage):
            from det_airflow.api.runtime_storage import StorageClient

            store = ThroughMasterStorage(storage, StorageClient(master, token, trial_id))
        else:
            store = CheckpointStorage.from_config(storage)
        destination = _place(store, experiment_id, trial_id)
        return cls(
            destination=destination,
            write_scalars=write_scalars,
            remove_when_synced=True,
            temporary_prefix=prefix,
        )

    @property
    def path(self) -> Path:
        """The folder, created."""
        with self._folder_lock:  # asked for by the training code and the background thread alike
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix=self._temporary_prefix))
            self._folder.mkdir(parents=True, exist_ok=True)
            return self._folder

    def add_scalars(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Queue one report (JSON values, as ``jsonable_metrics`` gives them); non-numbers are skipped
        when written."""
        if self._closed:
            return
        if self._write_scalars:
            self._pending.append((time.time(), group, steps_completed, metrics))
        elif self._destination is None:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="det-tensorboard", daemon=True)
            self._thread.start()
        if not self._wake.is_set():
            self._wake.set()

    def sync_now(self, selector: Callable[[Path], bool] | None = None) -> None:
        """Write what is queued and send the folder's new or changed files (those ``selector``
        keeps) now."""
        if not self._closed:
            with self._lock:
                self._write_pending()
                self._sync(selector)

    def close(self) -> None:
        """Write what is queued, close the event file and sync a last time."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._write_pending()
            if self._writer is not None:
                self._attempt("write", self._writer.close)
                self._writer = None
            synced = self._sync()
        if not synced:
            logger.warning("TensorBoard files: the last sync failed; they are left in %s", self._folder)
        elif self._remove_when_synced and self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _run(self) -> None:
        """Write what is queued at most every WRITE_GAP seconds; flush the event file and sync at
        most every ``interval`` seconds, and within that time after a report."""
        next_sync = 0.0
        sync_due: float | None = None
        while True:
            woke = self._wake.wait(None if sync_due is None else max(0.0, sync_due - time.monotonic()))
            if self._stop.is_set():
                return
            if woke:
                self._wake.clear()
                with self._lock:
                    self._write_pending(flush=False)
                if sync_due is None:
                    sync_due = max(time.monotonic(), next_sync)
            if sync_due is not None and time.monotonic() >= sync_due:
                with self._lock:
                    self._write_pending()
                    self._sync()
                next_sync, sync_due = time.monotonic() + self._interval, None
            if self._stop.wait(WRITE_GAP):  # reports arriving meanwhile are written together
                return

    def _write_pending(self, *, flush: bool = True) -> None:
        """Hand the queued reports to the event file's writer; ``flush``: and wait until they are
        in the file."""
        if self._pending:
            writer = self._event_writer()
            if writer is None:
                self._pending.clear()
            else:
                from tensorboard.compat.proto import event_pb2, summary_pb2

                def write() -> None:
                    while self._pending:
                        wall_time, group, steps, metrics = self._pending.popleft()
                        values = [
                            summary_pb2.Summary.Value(tag=f"{group}/{name}", simple_value=number)
                            for name, value in metrics.items()
                            if (number := as_float(value)) is not None
                        ]
                        if values:
                            summary = summary_pb2.Summary(value=values)
                            writer.add_event(
                                event_pb2.Event(wall_time=wall_time, step=steps, summary=summary)
                            )

                self._attempt("write", write)
        if flush and self._writer is not None:
            self._attempt("write", self._writer.flush)

    def _event_writer(self) -> Any:
        """The event file's writer, made at the first report; None without the tensorboard package."""
        if self._writer is None and self._write_scalars:
            try:
                from tensorboard.compat.proto import event_pb2  # noqa: F401
            except ImportError:
                logger.warning(
                    "metrics are not written as TensorBoard events: the tensorboard package is not "
                    "installed in this environment (pip install tensorboard)"
                )
                self._write_scalars = False
                return None
            writer = self._attempt("write", lambda: _EventFile(self.path))
            self._writer = None if writer is _FAILED else writer
        return self._writer

    def _sync(self, selector: Callable[[Path], bool] | None = None) -> bool:
        """Send the folder's new or changed files to the destination; False when one failed."""
        if self._destination is None or self._folder is None or not self._folder.is_dir():
            return True
        destination, folder = self._destination, self._folder

        def send() -> None:
            for path in sorted(folder.rglob("*")):
                if not path.is_file() or (selector is not None and not selector(path)):
                    continue
                relative = path.relative_to(folder).as_posix()
                stat = path.stat()
                seen = (
                    stat.st_size,
                    stat.st_mtime_ns,
                )  # taken before sending: a later change is sent next time
                if self._synced.get(relative) != seen:
                    destination.put(path, relative)
                    self._synced[relative] = seen

        return self._attempt("sync", send) is not _FAILED

    def _attempt(self, what: str, action: Callable[[], Any]) -> Any:
        """Run ``action``; a failure is one warning until the same kind of action succeeds again."""
        try:
            result = action()
        except Exception as error:
            if what not in self._failing:
                self._failing.add(what)
                where = f" to {self._destination.location()}" if what == "sync" and self._destination else ""
                logger.warning(
                    "TensorBoard files: could not %s%s (training goes on): %s", what, where, _one_line(error)
                )
            return _FAILED
        if what in self._failing:
            self._failing.discard(what)
            logger.info("TensorBoard files: %s works again", what)
        return result


_FAILED = object()


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


def _crc32c_python(data: bytes, _table: list[int] = _crc32c_table()) -> int:  # noqa: B008 - built once
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c() -> Callable[[bytes], int]:
    """CRC-32C (Castagnoli): google-crc32c's C code where it is installed (the object stores'
    clients bring it), else a table in Python."""
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":
            return lambda data: int(google_crc32c.value(data))
    except ImportError:
        pass
    return _crc32c_python


class _EventFile:
    """One event file in TensorBoard's record format: each serialized ``Event`` framed by its length
    and the masked CRC-32C of both, in an ordinary buffered file. tensorboard's own writers load its
    TensorFlow stand-in (numpy and some 500 modules, 0.15 s) into every trial, and its
    ``EventFileWriter`` opens and closes the file for every record from a thread of its own: over
    1 % of a report-every-batch loop's CPU."""

    def __init__(self, folder: Path) -> None:
        from tensorboard.compat.proto import event_pb2

        # Unique per file, in the order they were made (TensorBoard reads a run's files in name
        # order): a trial's next run, a process of the same pid in the same second, must not write
        # over this one's file where they are synced.
        seconds, nanoseconds = divmod(time.time_ns(), 10**9)
        name = f"events.out.tfevents.{seconds:010d}.{socket.gethostname()}.{os.getpid()}.{nanoseconds:09d}"
        self.path = folder / name
        self._crc = _crc32c()
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        self.add_event(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def _masked(self, data: bytes) -> bytes:
        crc = self._crc(data)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    def add_event(self, event: Any) -> None:
        data = event.SerializeToString()
        length = struct.pack("<Q", len(data))
        self._file.write(length + self._masked(length) + data + self._masked(data))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class _Place(abc.ABC):
    """Where a trial's files are kept in a storage: a folder, or a key prefix in an object store."""

    @abc.abstractmethod
    def location(self) -> str:
        """Where, for people."""

    @abc.abstractmethod
    def put(self, path: Path, relative: str) -> None:
        """Store the local file ``path`` as ``relative``."""

    @abc.abstractmethod
    def listing(self) -> dict[str, tuple[int, str]]:
        """``{relative path: (size, signature)}`` of the files kept; a file's signature changes
        whenever the file does."""

    @abc.abstractmethod
    def open(self, relative: str) -> contextlib.AbstractContextManager[IO[bytes] | None]:
        """One file's content as a stream; None when it is gone."""


class _FolderPlace(_Place):
    """A folder: of a ``shared_fs`` or ``directory`` storage."""

    def __init__(self, folder: Path, shared: Sequence[Path] = ()) -> None:
        """``shared``: the folders above ``folder`` that every user's trials write under."""
        self.folder = folder
        self.shared = tuple(shared)

    def location(self) -> str:
        return str(self.folder)

    def put(self, path: Path, relative: str) -> None:
        for level in self.shared:
            _shared_folder(level)
        with path.open("rb") as source:
            _write_own(source, self.folder, relative, self.shared)

    def listing(self) -> dict[str, tuple[int, str]]:
        listed: dict[str, tuple[int, str]] = {}
        if not self.folder.is_dir():
            return listed
        for path in self.folder.rglob("*"):
            with contextlib.suppress(FileNotFoundError):  # removed while listed
                if path.is_file():
                    stat = path.stat()
                    relative = path.relative_to(self.folder).as_posix()
                    listed[relative] = (stat.st_size, f"{stat.st_size}:{stat.st_mtime_ns}")
        return listed

    @contextlib.contextmanager
    def open(self, relative: str) -> Iterator[IO[bytes] | None]:
        try:
            stream = (self.folder / relative).open("rb")
        except FileNotFoundError:
            yield None
            return
        with stream:
            yield stream


class _ObjectPlace(_Place):
    """A key prefix in an S3 or Google Cloud Storage bucket, or an Azure Blob Storage container."""

    def __init__(self, store: ObjectStorage, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def location(self) -> str:
        return f"{self.store.scheme}://{self.store.bucket}/{self.prefix}"

    def put(self, path: Path, relative: str) -> None:
        with self.store.translated():
            self.store._put(path, self.prefix + relative)

    def listing(self) -> dict[str, tuple[int, str]]:
        listed: dict[str, tuple[int, str]] = {}
        with self.store.translated():
            for key, size, signature in _versions(self.store, self.prefix):
                relative = key[len(self.prefix) :]
                if relative and not relative.endswith("/"):  # folder markers hold no data
                    listed[relative] = (size, signature)
        return listed

    @contextlib.contextmanager
    def open(self, relative: str) -> Iterator[IO[bytes] | None]:
        with self.store.translated():  # also around the reads of the caller's block
            stream = self.store._open(self.prefix + relative)
            if stream is None:
                yield None
                return
            with contextlib.closing(stream):
                yield stream


class _MasterPlace(_Place):
    """A trial's files in an object store reached through the master: a trial writes its own, a
    TensorBoard task reads those of the trials it shows (the master checks which)."""

    def __init__(self, store: ThroughMasterStorage, prefix: str, trial_id: int) -> None:
        self.store = store
        self.prefix = prefix
        self.trial_id = trial_id

    def location(self) -> str:
        return f"{self.store.scheme}://{self.store.bucket}/{self.prefix} (through {self.store.endpoint()})"

    def put(self, path: Path, relative: str) -> None:
        self.store.client.put_tensorboard_file(relative, path)

    def listing(self) -> dict[str, tuple[int, str]]:
        listed: dict[str, tuple[int, str]] = self.store.client.tensorboard_files(self.trial_id)
        return listed

    @contextlib.contextmanager
    def open(self, relative: str) -> Iterator[IO[bytes] | None]:
        stream = self.store.client.open_tensorboard_file(self.trial_id, relative)
        if stream is None:
            yield None
            return
        with contextlib.closing(stream):
            yield stream


def tensorboard_place(store: CheckpointStorage, experiment_id: int, trial_id: int) -> _Place:
    """Where a trial's files are kept in ``store``: what the master lists, reads and writes for
    the trials whose store it reaches for them."""
    return _place(store, experiment_id, trial_id)


def _place(store: CheckpointStorage, experiment_id: int, trial_id: int) -> _Place:
    prefix = tensorboard_prefix(experiment_id, trial_id)
    if isinstance(store, ThroughMasterStorage):
        return _MasterPlace(store, f"{store.prefix}/{prefix}" if store.prefix else prefix, trial_id)
    if isinstance(store, FolderStorage):
        top = store.base / "tensorboard"
        return _FolderPlace(store.base / prefix, shared=(top, top / "experiment"))
    if isinstance(store, ObjectStorage):
        return _ObjectPlace(store, f"{store.prefix}/{prefix}" if store.prefix else prefix)
    raise DetError(f"checkpoint_storage type {store.type}: TensorBoard files cannot be kept there")


def _versions(store: ObjectStorage, prefix: str) -> Iterable[tuple[str, int, str]]:
    """``(key, size, etag)`` of each object under ``prefix``: the etag changes with every upload."""
    from det_airflow.core._azure import AzureStorage
    from det_airflow.core._gcs import GCSStorage
    from det_airflow.core._s3 import S3Storage

    if isinstance(store, S3Storage):
        for page in store._pages(prefix):
            for obj in page.get("Contents", ()):
                yield obj["Key"], int(obj["Size"]), str(obj.get("ETag") or "")
    elif isinstance(store, GCSStorage):
        for blob in store._client.list_blobs(store.bucket, prefix=prefix):
            yield blob.name, int(blob.size or 0), f"{blob.etag}:{blob.generation}"
    elif isinstance(store, AzureStorage):
        for blob in store._container().list_blobs(name_starts_with=prefix):
            yield blob.name, int(blob.size), str(blob.etag)
    else:
        for key, size in store._list(prefix):
            yield key, size, str(size)


#: A folder every user's trials make their own folders in, as the checkpoint root is: anyone may
#: add to it, nobody may list it, and only an entry's owner may remove it (the sticky bit). Under
#: a storage every user shares (the checkpoint root) the platform makes them, root-owned
#: (:func:`prepare_tensorboard_root`): the owner of a sticky folder could remove anyone's entries.
SHARED_FOLDER_MODE = 0o1733
#: A trial's own folders below them (``experiment/<id>``, ``trial/<id>`` and what its code makes)
#: and its files: for its owner's uid alone, as its checkpoints are.
OWN_FOLDER_MODE = 0o700
OWN_FILE_MODE = 0o600
# The shared folders of a storage's TensorBoard files, from its base down.
_SHARED_LEVELS = ("tensorboard", "experiment")


def prepare_tensorboard_root(base: str | os.PathLike[str]) -> None:
    """The platform's part, for a worker that is root, on a storage every user's trials share (the
    checkpoint root ``base``): ``tensorboard/`` and ``tensorboard/experiment/`` made or set right
    as root-owned :data:`SHARED_FOLDER_MODE` folders, never through a link. A trial that made them
    first does not keep them."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in _SHARED_LEVELS:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, SHARED_FOLDER_MODE, dir_fd=fd)
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise DetError(f"{name} in {base}: not a folder of the platform's ({exc.strerror})") from None
            os.close(fd)
            fd = child
            os.fchown(fd, 0, 0)
            os.fchmod(fd, SHARED_FOLDER_MODE)
    finally:
        os.close(fd)


def _shared_folder(path: Path) -> None:
    """Make ``path`` as a folder of everyone's (:data:`SHARED_FOLDER_MODE`) unless it exists: the
    first trial to write TensorBoard files under a storage must not keep other users' out."""
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        return  # another trial made it first
    os.chmod(path, SHARED_FOLDER_MODE)  # past the umask, which mkdir's mode would go through


def _write_own(source: IO[bytes], folder: Path, relative: str, shared: Sequence[Path]) -> None:
    """:func:`_write_in_place` of ``source`` to ``folder/relative``, where every folder below the
    ``shared`` ones is this process's own: made with :data:`OWN_FOLDER_MODE`, and one of another
    uid's (another user's trial made it first) or a link is refused, never written through. Folders
    are opened one by one without following links, so none can be swapped in between."""
    top = shared[0].parent if shared else folder
    own = (folder / relative).parent.relative_to(shared[-1] if shared else folder).parts
    top.mkdir(parents=True, exist_ok=True)
    # O_PATH: passing through the shared folders needs no right to list them (mode 1733).
    fd = os.open(top, os.O_PATH | os.O_DIRECTORY)
    try:
        for level in shared:
            child = _open_folder(fd, level.name, top)
            os.close(fd)
            fd = child
        for name in own:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, OWN_FOLDER_MODE, dir_fd=fd)
            child = _open_folder(fd, name, top)
            os.close(fd)
            fd = child
            _check_own(fd, folder / relative)
        target = os.open(
            Path(relative).name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, OWN_FILE_MODE, dir_fd=fd
        )
        with os.fdopen(target, "r+b") as out:
            _check_own(out.fileno(), folder / relative)
            shutil.copyfileobj(source, out, 1 << 20)
            out.truncate()
    finally:
        os.close(fd)


def _open_folder(fd: int, name: str, top: Path) -> int:
    """Folder ``name`` in folder ``fd``, without following a link."""
    try:
        return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        raise DetError(f"{name} under {top}: not a folder this trial may write in ({exc.strerror})") from None


def _check_own(fd: int, where: Path) -> None:
    """``fd`` must be this process's own (a folder of an older version, 0755, is narrowed)."""
    found = os.fstat(fd)
    if found.st_uid != os.geteuid():
        raise DetError(
            f"{where}: a folder on the way belongs to uid {found.st_uid}, not to this trial's uid "
            f"{os.geteuid()}; its TensorBoard files are not written there"
        )
    if not stat.S_ISDIR(found.st_mode):
        if stat.S_IMODE(found.st_mode) & ~OWN_FILE_MODE:
            os.fchmod(fd, OWN_FILE_MODE)
    elif stat.S_IMODE(found.st_mode) & ~OWN_FOLDER_MODE:
        os.chmod(f"/proc/self/fd/{fd}", OWN_FOLDER_MODE)  # the very folder held (an O_PATH fd)


def _write_in_place(source: IO[bytes], target: Path) -> None:
    """Copy ``source`` over ``target``'s bytes, not into a new file: a TensorBoard reading an event
    file keeps it open and reads on from where it was, so a replaced file would never be read again.
    Event files only grow, so their bytes already read are rewritten with the same bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("r+b" if target.exists() else "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
        out.truncate()


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _read_record(path: Path) -> dict[str, str]:
    """What an earlier fetch copied (see FETCHED_FILE); empty when unreadable, so all is copied."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}


def _write_record(path: Path, record: Mapping[str, str]) -> None:
    partial = path.with_name(f"{path.name}.partial")
    partial.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    os.replace(partial, path)


def _one_line(error: BaseException) -> str:
    return next(iter(str(error).strip().splitlines()), "") or type(error).__name__
