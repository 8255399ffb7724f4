"""What a trial may do with files in object storage, which it reaches through the master: the
checks, and the store each call goes to (routes in master/routes_storage.py).

The platform's credentials of a store (its Airflow connection, or the chain of the machine the
master runs on) never enter a trial. A trial whose experiment's ``checkpoint_storage`` carries no
credentials of its owner's own sends and fetches its files here, and the master opens the store:

- a checkpoint uuid's files are written only by the trial that wrote its first file (it claims the
  uuid: ``det_checkpoint_claims``), only while the uuid is not registered, and only where its
  store holds nothing yet: a registered checkpoint never changes, and another trial's never becomes
  another's;
- a checkpoint is read only as its registered files, by a trial whose owner may read it (an
  experiment of the same owner, or the checkpoint its experiment warm-starts from); a trial also
  reads back the files of its own claimed uuid;
- a trial's TensorBoard files are written by that trial alone, and read by it and by the
  TensorBoards that show it (their sources were checked against their creator's access).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select
from sqlalchemy.exc import IntegrityError

from det_airflow import object_storage
from det_airflow.api.runtime_storage import MISSING_FILE as MISSING
from det_airflow.core._objects import ObjectStorage
from det_airflow.core._storage import checked_relative
from det_airflow.core._tensorboard import tensorboard_place
from det_airflow.errors import DetError
from det_airflow.master import experiments, models_registry, reports, schema, trials
from det_airflow.master.authz import PermissionDenied
from det_airflow.master.db import get_database
from det_airflow.master.lifecycle import NotFound, StateError, now

# A part of a key that names a checkpoint's or the TensorBoard files' folder.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_TENSORBOARD_FOLDER = "tensorboard"
# How long an opened store is kept for the next call: opening one reads its connection and builds
# the client (a boto3 client takes tens of milliseconds), and a trial syncs its TensorBoard files
# every few seconds. A connection's new key is used within this long.
_STORE_SECONDS = 60.0
_STORES_KEPT = 64


class _Stores:
    """Stores opened with the platform's credentials, kept for a minute by their config."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened: dict[str, tuple[float, ObjectStorage]] = {}

    def open(self, storage: Mapping[str, Any]) -> ObjectStorage:
        key = json.dumps(storage, sort_keys=True, default=str)
        with self._lock:
            found = self._opened.get(key)
            if found is not None and time.monotonic() - found[0] < _STORE_SECONDS:
                return found[1]
        opened = object_storage.open_storage(storage)
        if not isinstance(opened, ObjectStorage):  # is_object_storage was checked
            raise DetError(f"checkpoint_storage type {storage.get('type')!r} is no object store")
        with self._lock:
            if len(self._opened) >= _STORES_KEPT:
                del self._opened[min(self._opened, key=lambda k: self._opened[k][0])]
            self._opened[key] = (time.monotonic(), opened)
        return opened

    def clear(self) -> None:
        with self._lock:
            self._opened.clear()


stores = _Stores()


@dataclass(frozen=True)
class Readable:
    """A checkpoint a trial may read: where its files are, and its registered files (None for the
    trial's own checkpoint being written, whose files are what the store holds)."""

    uuid: str
    store: ObjectStorage | None  # None: nothing the trial may read is there yet
    registered: Mapping[str, int] | None

    def files(self) -> dict[str, int]:
        if self.store is None:
            return {}
        if self.registered is not None:
            return {str(path): int(size) for path, size in self.registered.items()}
        return self.store.files(self.uuid)

    def file(self, relative: str) -> tuple[ObjectStorage, str, int | None]:
        """The store, the checked path of one of the files and the size it was registered with
        (None when not registered). NotFound for a file it does not have."""
        path = checked_relative(relative).as_posix()
        if self.store is None:
            raise NotFound(f"checkpoint {self.uuid}: {MISSING} {relative!r}")
        size = None
        if self.registered is not None:
            if path not in self.registered:
                raise NotFound(f"checkpoint {self.uuid}: {MISSING} {relative!r} (it registered none)")
            size = int(self.registered[path])
        return self.store, path, size


# --- checkpoints ---------------------------------------------------------------------------------


def checkpoint_to_read(conn: Connection, trial_id: int, uuid: str) -> Readable:
    """Checkpoint ``uuid`` as trial ``trial_id`` may read it; PermissionDenied when it may not."""
    row = _registered(conn, uuid)
    if row is not None:
        if not trials.may_read_checkpoint(conn, trial_id, row):
            raise PermissionDenied(
                f"trial {trial_id} may not read checkpoint {uuid}: it belongs to another user's "
                "experiment and is not the checkpoint this experiment warm-starts from"
            )
        if row.state == "DELETED":
            raise NotFound(f"checkpoint {uuid} was deleted; its files are gone")
        experiment = experiments.get_experiment(conn, row.experiment_id)
        store = _store_of(experiment, f"checkpoint {uuid}")
        return Readable(uuid, store, dict(row.resources or {}))
    claimant = _claimant(conn, uuid)
    if claimant is None:
        return Readable(uuid, None, None)  # nothing is written there that this trial may see
    if claimant != trial_id:
        raise PermissionDenied(
            f"trial {trial_id} may not read checkpoint {uuid}: trial {claimant} is writing it"
        )
    return Readable(uuid, _own_store(conn, trial_id), None)


def checkpoint_to_write(trial_id: int, uuid: str, relative: str) -> tuple[ObjectStorage, str]:
    """The store, and the checked path, that file ``relative`` of checkpoint ``uuid`` goes to for
    trial ``trial_id``; claims the uuid for the trial at its first file. Refused: another trial's
    uuid (403), a registered checkpoint (409), a uuid the store holds files under that no trial
    wrote through the master (409)."""
    reports.check_checkpoint_uuid(uuid)
    path = checked_relative(relative).as_posix()
    db = get_database()
    with db.read() as conn:
        store = _own_store(conn, trial_id, writing=True)
        _check_unregistered(conn, uuid)
        claimant = _claimant(conn, uuid)
    if claimant is None:
        if store.exists(uuid):
            with db.read() as conn:  # another worker of this trial may have claimed it meanwhile
                claimant = _claimant(conn, uuid)
            if claimant is None:
                raise StateError(
                    f"checkpoint {uuid}: {store.location(uuid)} holds files no trial wrote through "
                    "the master; a new checkpoint needs a new uuid"
                )
        else:
            claimant = _claim(trial_id, uuid)
    if claimant != trial_id:
        raise PermissionDenied(
            f"trial {trial_id} may not write checkpoint {uuid}: trial {claimant} is writing it; "
            "a new checkpoint needs a new uuid"
        )
    return store, path


def checkpoint_to_delete(conn: Connection, trial_id: int, uuid: str) -> ObjectStorage | None:
    """The store whose files of checkpoint ``uuid`` trial ``trial_id`` deletes: its own claimed
    uuid's (a failed upload), or its own registered checkpoint's (``checkpoint.delete``, the record
    following); None when there is nothing to delete."""
    row = _registered(conn, uuid)
    if row is not None:
        if row.trial_id != trial_id:
            raise PermissionDenied(
                f"trial {trial_id} may not delete checkpoint {uuid}: it belongs to trial {row.trial_id}"
            )
        if row.state == "DELETED":
            return None
        models_registry.check_not_registered(conn, uuid)
        return _store_of(experiments.get_experiment(conn, row.experiment_id), f"checkpoint {uuid}")
    claimant = _claimant(conn, uuid)
    if claimant is None:
        return None
    if claimant != trial_id:
        raise PermissionDenied(
            f"trial {trial_id} may not delete checkpoint {uuid}: trial {claimant} is writing it"
        )
    return _own_store(conn, trial_id)


def _registered(conn: Connection, uuid: str) -> Row | None:
    return conn.execute(select(schema.checkpoints).where(schema.checkpoints.c.uuid == uuid)).first()


def _check_unregistered(conn: Connection, uuid: str) -> None:
    if _registered(conn, uuid) is not None:
        raise StateError(
            f"checkpoint {uuid} is registered: its files never change; a new checkpoint needs a new uuid"
        )


def _claimant(conn: Connection, uuid: str) -> int | None:
    claims = schema.checkpoint_claims
    found = conn.execute(select(claims.c.trial_id).where(claims.c.uuid == uuid)).scalar()
    return None if found is None else int(found)


def _claim(trial_id: int, uuid: str) -> int:
    """Claim ``uuid`` for the trial; the trial that holds it (another, if it claimed it first)."""
    db = get_database()
    try:
        with db.begin() as conn:
            _check_unregistered(conn, uuid)
            conn.execute(
                schema.checkpoint_claims.insert().values(uuid=uuid, trial_id=trial_id, claimed_at=now())
            )
        return trial_id
    except IntegrityError:
        with db.read() as conn:
            claimant = _claimant(conn, uuid)
        if claimant is None:  # the insert failed for another reason: not a claim to yield to
            raise
        return claimant


# --- TensorBoard files ---------------------------------------------------------------------------


def tensorboard_to_read(conn: Connection, trial_id: int, source_trial_id: int) -> Any:
    """Where trial ``source_trial_id``'s TensorBoard files are, for trial ``trial_id``: itself, or a
    TensorBoard that shows it."""
    if source_trial_id != trial_id and not _shows(conn, trial_id, source_trial_id):
        raise PermissionDenied(
            f"trial {trial_id} may not read the TensorBoard files of trial {source_trial_id}: only "
            "that trial and the TensorBoards that show it may"
        )
    source = trials.get_trial(conn, source_trial_id)
    experiment = experiments.get_experiment(conn, source.experiment_id)
    store = _store_of(experiment, f"the TensorBoard files of trial {source_trial_id}")
    return tensorboard_place(store, experiment.id, source.id)


def tensorboard_to_write(conn: Connection, trial_id: int, relative: str) -> tuple[Any, str]:
    """Where trial ``trial_id``'s own TensorBoard file ``relative`` goes."""
    path = checked_relative(relative).as_posix()
    trial = trials.get_trial(conn, trial_id)
    store = _own_store(conn, trial_id, writing=True)
    return tensorboard_place(store, trial.experiment_id, trial.id), path


def _shows(conn: Connection, trial_id: int, source_trial_id: int) -> bool:
    """Whether trial ``trial_id`` is a TensorBoard's whose sources include ``source_trial_id``."""
    experiment_id = trials.get_trial(conn, trial_id).experiment_id
    task = conn.execute(select(schema.tasks).where(schema.tasks.c.id == experiment_id)).first()
    if task is None or task.type != "tensorboard":
        return False
    sources = (task.args or {}).get("sources") or []
    return any(isinstance(s, Mapping) and s.get("trial_id") == source_trial_id for s in sources)


# --- the stores ----------------------------------------------------------------------------------


def _own_store(conn: Connection, trial_id: int, *, writing: bool = False) -> ObjectStorage:
    """The store of the trial's own experiment; ``writing``: checked to be one the trial's files
    may go to."""
    experiment = experiments.get_experiment(conn, trials.get_trial(conn, trial_id).experiment_id)
    store = _store_of(experiment, f"trial {trial_id}'s files")
    if writing:
        _check_prefix(store.prefix)
    return store


def _store_of(experiment: Row, what: str) -> ObjectStorage:
    storage = dict(experiment.config.get("checkpoint_storage") or {})
    if not object_storage.is_object_storage(storage):
        raise DetError(
            f"{what}: experiment {experiment.id} keeps its checkpoints in {storage.get('type')} "
            "storage, which trials write themselves, not through the master"
        )
    return stores.open(storage)


def _check_prefix(prefix: str) -> None:
    """Refuse a prefix that would put a trial's files inside another's folder (``<prefix>/<uuid>/``,
    ``<prefix>/tensorboard/...``) of the same bucket: its objects would appear among another
    checkpoint's or TensorBoard's files."""
    for part in prefix.split("/"):
        if _UUID.fullmatch(part) or part == _TENSORBOARD_FOLDER:
            raise DetError(
                f"checkpoint_storage.prefix: {prefix!r} names a checkpoint's or TensorBoard's folder "
                f"({part!r}); choose a prefix of your own"
            )
