"""Checkpoints in object storage, reached through the master: the trial's store when the platform,
not the experiment's own config, holds the store's credentials.

Trial code is untrusted, so the platform's key (an Airflow connection, or the chain of the machine
the master runs on) never enters a trial. The trial sends and fetches its files through the
master's ``/runtime/trials/{id}/storage`` routes instead (``det_airflow.api.runtime_storage``), and
the master, which checks each call, does the store's calls with its own credentials: a trial
writes only its own checkpoints (a uuid becomes its own with the first file it writes, and a
registered checkpoint never changes) and its own TensorBoard files, and reads only checkpoints its
owner may read. The objects land where the store's own class would put them
(``<prefix>/<uuid>/...``), so the master's downloads, deletes and garbage collection, and a trial
of the owner's own credentials, find them as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from det_airflow.core._objects import SECTION, ObjectStorage, carries_credentials, string_field
from det_airflow.core._storage import CheckpointStorage
from det_airflow.errors import DetError

# Each store's URL scheme and the name of its section's bucket field.
_STORES = {"s3": ("s3", "bucket"), "gcs": ("gs", "bucket"), "azure": ("azure", "container")}


def through_master(section: Mapping[str, Any] | None) -> bool:
    """Whether a trial of a config with this ``checkpoint_storage`` reaches its store through the
    master: an object store whose section carries no credentials of the owner's own."""
    return bool(section) and (section or {}).get("type") in _STORES and not carries_credentials(section or {})


def trial_storage(
    section: Mapping[str, Any] | None, *, master: str, token: str | None, trial_id: int
) -> CheckpointStorage | None:
    """The checkpoint storage of a trial on a cluster: through the master (see
    :func:`through_master`), else the store the section names, opened here; None without a section."""
    if not section:
        return None
    if through_master(section):
        from det_airflow.api.runtime_storage import StorageClient

        return ThroughMasterStorage(section, StorageClient(master, token, trial_id))
    return CheckpointStorage.from_config(section)


class ThroughMasterStorage(ObjectStorage):
    """An object store's checkpoints, as its section names them, written and read through the
    master (``client``): the trial holds no credentials of the store.

    Its keys are those the store's own class uses (``<prefix>/<uuid>/<file>``); each call is one of
    the master's routes for the checkpoint the key names.
    """

    def __init__(self, section: Mapping[str, Any], client: Any) -> None:
        kind = str(section.get("type"))
        if kind not in _STORES:
            raise DetError(f"{SECTION}.type: expected s3, gcs or azure, got {kind!r}")
        self.scheme, field = _STORES[kind]
        bucket = string_field(section, field)
        if not bucket:
            raise DetError(f"{SECTION}.{field}: required for type {kind}")
        super().__init__(bucket, string_field(section, "prefix") or "")
        self.type = kind
        self.noun = "container" if field == "container" else "bucket"
        self._address = {k: str(section[k]) for k in ("endpoint_url", "account_url") if section.get(k)}
        self.client = client

    def describe(self, uuid: str) -> dict[str, str]:
        # The master records where the files are from the experiment's config; this is the same.
        return {"type": self.type, self.noun: self.bucket, "key": self.key(uuid), **self._address}

    def files(self, uuid: str) -> dict[str, int]:
        return self.client.checkpoint_files(uuid)  # type: ignore[no-any-return]

    def exists(self, uuid: str) -> bool:
        return bool(self.files(uuid))

    def delete(self, uuid: str) -> None:
        self.client.delete_checkpoint(uuid)

    def endpoint(self) -> str:
        return f"the master at {self.client.master}"

    def _connect(self) -> Any:
        return self.client

    def _checkpoint_file(self, key: str) -> tuple[str, str]:
        """``(uuid, relative path)`` of the file a key of this storage names."""
        rest = key[len(self.prefix) + 1 :] if self.prefix else key
        uuid, _, relative = rest.partition("/")
        return uuid, relative

    def _list(self, prefix: str) -> Iterable[tuple[str, int]]:
        uuid, _ = self._checkpoint_file(prefix)
        for relative, size in self.files(uuid).items():
            yield self.key(uuid) + relative, size

    def _put(self, path: Path, key: str) -> None:
        self.client.put_checkpoint_file(*self._checkpoint_file(key), path)

    def _get(self, key: str, path: Path) -> None:
        uuid, relative = self._checkpoint_file(key)
        stream = self.client.open_checkpoint_file(uuid, relative)
        if stream is None:
            raise self.missing(uuid)
        import shutil

        with stream, path.open("wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)

    def _open(self, key: str) -> IO[bytes] | None:
        return self.client.open_checkpoint_file(*self._checkpoint_file(key))  # type: ignore[no-any-return]

    def _delete(self, uuid: str, keys: Iterable[str]) -> None:
        self.client.delete_checkpoint(uuid)

    def _describe_error(self, error: BaseException) -> str | None:
        return None  # the master's refusals are our own errors already; others are bugs or the disk's
