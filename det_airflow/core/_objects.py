"""Checkpoints in an object store: an S3 bucket (``_s3``), a Google Cloud Storage bucket (``_gcs``)
or an Azure Blob Storage container (``_azure``).

A checkpoint is the objects under ``<prefix>/<uuid>/``. It is written into a local folder first and
uploaded when complete; a failed upload deletes what it had sent, so no partial checkpoint stays
behind to be registered or restored. Each store's class gives the few calls that differ (list, put,
get, open, delete) and how its client's errors read; the rest is here, the same for all three.

The stores' client libraries are imported on first use: every trial imports the Core API at start,
and only those that checkpoint to a store need its library.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from det_airflow.core._storage import (
    CheckpointFilesMissing,
    CheckpointStorage,
    checked_relative,
    resources_of,
)
from det_airflow.errors import DetError

SECTION = "checkpoint_storage"


class ObjectStorage(CheckpointStorage):
    """Checkpoints as objects under ``<scheme>://<bucket>/<prefix>/<uuid>/``.

    A subclass names its store (``type``, ``scheme``, ``noun``: "bucket" or "container"), builds
    its client in ``_connect``, and gives the calls below that take keys, never uuids.
    """

    scheme: str
    noun = "bucket"

    def __init__(self, bucket: str, prefix: str = "") -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    @classmethod
    def placed(cls, described: Mapping[str, Any], uuid: str) -> tuple[str, str] | None:
        """``(bucket, prefix)`` of a registered checkpoint's record (see ``describe``) of checkpoint
        ``uuid`` in this kind of store; None when the record is no such record."""
        bucket, key = described.get(cls.noun), described.get("key")
        if not isinstance(bucket, str) or not bucket or not isinstance(key, str):
            return None
        prefix, _, name = key.rstrip("/").rpartition("/")
        return (bucket, prefix) if name == uuid else None

    def key(self, uuid: str) -> str:
        """The key prefix of checkpoint ``uuid``'s objects, ending in ``/``."""
        return f"{self.prefix}/{uuid}/" if self.prefix else f"{uuid}/"

    def location(self, uuid: str) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key(uuid)}"

    @contextlib.contextmanager
    def writing(self, uuid: str) -> Iterator[Path]:
        """A local temporary folder, uploaded when the block succeeds and removed in any case."""
        if self.exists(uuid):
            raise DetError(f"checkpoint {uuid} already exists at {self.location(uuid)}")
        with temporary_folder(uuid) as folder:
            yield folder
            self._upload(uuid, folder)

    @contextlib.contextmanager
    def local_path(self, uuid: str) -> Iterator[Path]:
        """The checkpoint downloaded into a temporary folder, removed when the block ends."""
        with temporary_folder(uuid) as folder:
            self.download(uuid, folder)
            yield folder

    @contextlib.contextmanager
    def adding(self, uuid: str, folder: str) -> Iterator[Path]:
        """A local temporary folder whose files are uploaded under ``<uuid>/<folder>/`` when the
        block succeeds (none when it fails), and removed in any case."""
        prefix = checked_relative(f"{uuid}/{folder}").relative_to(uuid).as_posix()
        with temporary_folder(uuid) as local:
            yield local
            for relative in resources_of(local):
                self.put_file(uuid, f"{prefix}/{relative}", local / relative)

    def download(self, uuid: str, dest: Path) -> None:
        files = self.files(uuid)
        if not files:
            raise self.missing(uuid)
        with self.translated():
            for relative in files:
                target = Path(dest) / checked_relative(relative)
                target.parent.mkdir(parents=True, exist_ok=True)
                self._get(self.key(uuid) + relative, target)

    def delete(self, uuid: str) -> None:
        with self.translated():
            self._delete(uuid, (key for key, _ in self._list(self.key(uuid))))

    def exists(self, uuid: str) -> bool:
        with self.translated():
            return next(iter(self._list(self.key(uuid))), None) is not None

    def files(self, uuid: str) -> dict[str, int]:
        key = self.key(uuid)
        found: dict[str, int] = {}
        with self.translated():
            for name, size in self._list(key):
                relative = name[len(key) :]
                if relative and not relative.endswith("/"):  # folder markers hold no data
                    found[relative] = size
        return found

    def open_file(self, uuid: str, relative: str) -> IO[bytes]:
        """The object's body, streamed as it is read; close it when done."""
        key = self.key(uuid) + checked_relative(relative).as_posix()
        with self.translated():
            stream = self._open(key)
        if stream is None:
            raise CheckpointFilesMissing(f"checkpoint {uuid}: no file {relative!r} at {self.location(uuid)}")
        return stream

    def put_file(self, uuid: str, relative: str, path: Path) -> None:
        """Store the local file ``path`` as checkpoint ``uuid``'s file ``relative`` (the master does,
        for a trial that sends its files through it)."""
        key = self.key(uuid) + checked_relative(relative).as_posix()
        with self.translated():
            self._put(path, key)

    def _upload(self, uuid: str, folder: Path) -> None:
        key = self.key(uuid)
        try:
            with self.translated():
                for relative in resources_of(folder):
                    self._put(folder / relative, key + relative)
        except BaseException:
            # What was sent so far is no checkpoint; a failure to clean it up must not hide why.
            with contextlib.suppress(Exception):
                self.delete(uuid)
            raise

    @functools.cached_property
    def _client(self) -> Any:
        """The store's client, built on first use."""
        with self.translated():
            return self._connect()

    @contextlib.contextmanager
    def translated(self) -> Iterator[None]:
        """The client's errors as one line for the user, naming the bucket and the endpoint."""
        try:
            yield
        except DetError:
            raise
        except Exception as error:
            message = self._describe_error(error)
            if message is None:
                raise
            raise DetError(
                f"{SECTION}: {self.noun} {self.bucket!r} at {self.endpoint()}: {message}"
            ) from None

    @abc.abstractmethod
    def endpoint(self) -> str:
        """Where the store is, for error messages."""

    @abc.abstractmethod
    def _connect(self) -> Any:
        """A client of the store."""

    @abc.abstractmethod
    def _list(self, prefix: str) -> Iterable[tuple[str, int]]:
        """``(key, size)`` of each object under ``prefix``, page by page as iterated."""

    @abc.abstractmethod
    def _put(self, path: Path, key: str) -> None:
        """Upload the local file ``path`` as object ``key``."""

    @abc.abstractmethod
    def _get(self, key: str, path: Path) -> None:
        """Download object ``key`` into the local file ``path``."""

    @abc.abstractmethod
    def _open(self, key: str) -> IO[bytes] | None:
        """Object ``key``'s body as a stream; None when there is no such object."""

    @abc.abstractmethod
    def _delete(self, uuid: str, keys: Iterable[str]) -> None:
        """Delete the objects ``keys`` (all of checkpoint ``uuid``'s)."""

    @abc.abstractmethod
    def _describe_error(self, error: BaseException) -> str | None:
        """What went wrong, for an error of the store's client (or one caused by one); None for
        other errors, which are raised as they are."""


def carries_credentials(storage: Mapping[str, Any]) -> bool:
    """Whether a ``checkpoint_storage`` section carries its owner's own credentials (Determined's
    ``access_key``/``secret_key`` for s3, ``connection_string`` or ``credential`` for azure): a
    trial then opens the store with them itself. Without them the store is opened only with the
    platform's credentials, which never leave the master (see ``_through_master``)."""
    kind = storage.get("type")
    if kind == "s3":
        return bool(storage.get("access_key") and storage.get("secret_key"))
    if kind == "azure":
        return bool(storage.get("connection_string") or storage.get("credential"))
    return False


def string_field(storage: Mapping[str, Any], key: str) -> str | None:
    """A string field of a ``checkpoint_storage`` section; None when absent or empty."""
    value = storage.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DetError(f"{SECTION}.{key}: expected a string, got {value!r}")
    return value


def causes(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


@contextlib.contextmanager
def temporary_folder(uuid: str) -> Iterator[Path]:
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=f"det-checkpoint-{uuid}-"))  # mode 0700
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
