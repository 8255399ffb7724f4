"""Removing files for the master: only under the platform's roots, never through a link, and never
as root on a path a user chose.

A checkpoint's folder, a trial's work folder: the master removes them for GC, ``DELETE
/checkpoints/{uuid}`` and ``det experiment delete``. Their paths come from configs and reports a
user wrote, so each removal

- lies under one of the roots the admin configured (the checkpoint root, the trial work folder,
  ``allowed_host_paths``), compared as written, without resolving links;
- walks from the root one folder at a time with ``O_NOFOLLOW`` (a link swapped in for a folder on
  the way stops it) and removes the last folder with the fd-based ``shutil.rmtree``, which never
  follows a link inside it (a link named as the checkpoint is refused, its target left alone);
- runs, when the API server is root, in a child process that has dropped to the owner's identity
  first: what the owner's trials could not have written, it cannot remove either.

A removal that cannot be done is answered as a "not removed" line, never raised.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Connection, Row

from det_airflow import settings
from det_airflow.api.models import Removal
from det_airflow.errors import DetError
from det_airflow.master import identities

# O_PATH: passing through needs only search permission (the checkpoint root is 1733, unlistable).
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Python's fd-based rmtree is what makes the last step link-safe; refuse to run without it.
if not shutil.rmtree.avoids_symlink_attacks:
    raise ImportError("det_airflow.master.file_cleanup needs a shutil.rmtree that does not follow links")


class Identity(NamedTuple):
    """The uid and gid a removal runs as."""

    uid: int
    gid: int


def remove_tree(
    path: str | os.PathLike[str], roots: Sequence[Path], what: str, *, identity: Identity | None
) -> list[str]:
    """Remove the folder ``path`` and all in it if it lies under one of
    ``roots``; answers what was not removed, one line (empty when removed or already gone).

    With ``identity`` and a root API server, the removal runs as that uid/gid. ``identity=None``
    removes as this process's own user: for a master that is not root (its trials ran as its user),
    or for a folder of the platform's own naming (``<trial_work_dir>/exp_<id>``, whose folders the
    worker made root-owned; what the trial wrote inside goes without any link being followed).
    """
    target = Path(os.path.abspath(path))
    found = _under(target, roots)
    if found is None:
        return [outside_roots(target, roots, what)]
    root, parts = found
    if os.geteuid() != 0 or identity is None:
        problem = _remove(root, parts)
    elif identity.uid == 0:
        problem = "the master does not remove files as root on a path a user chose"
    else:
        problem = _remove_as(identity, root, parts)
    return [f"{what} at {target}: {problem}; not removed"] if problem else []


def outside_roots(path: str | os.PathLike[str], roots: Sequence[Path], what: str) -> str:
    """The "not removed" line of a folder outside every root; empty when it lies under one."""
    target = Path(os.path.abspath(path))
    if _under(target, roots) is not None:
        return ""
    allowed = ", ".join(str(r) for r in roots) or "none configured"
    return f"{what} at {target}: not under the checkpoint root or an allowed folder ({allowed}); not removed"


def _under(target: Path, roots: Sequence[Path]) -> tuple[Path, tuple[str, ...]] | None:
    """The deepest root ``target`` lies strictly under, and the names from there to it."""
    best: tuple[Path, tuple[str, ...]] | None = None
    for root in roots:
        root = Path(os.path.abspath(root))
        if target == root or os.path.commonpath([target, root]) != str(root):
            continue
        parts = target.relative_to(root).parts
        if best is None or len(parts) < len(best[1]):
            best = (root, parts)
    return best


def _remove(root: Path, parts: tuple[str, ...]) -> str | None:
    """Remove ``root/parts...`` without following a link; answers the problem, or None."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return None  # no root, nothing under it
    except OSError as exc:
        return f"cannot open {root} ({exc.strerror})"
    try:
        for index, name in enumerate(parts[:-1]):
            where = root.joinpath(*parts[: index + 1])
            try:
                inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                return f"{where} is a link or not a folder ({exc.strerror}); links are not followed"
            os.close(fd)
            fd = inner
            if not stat.S_ISDIR(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW may open a link itself
                return f"{where} is a link or not a folder; links are not followed"
        name = parts[-1]
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):  # a link named as the folder: neither it nor its target goes
                return "not a folder (a link or a file; links are not followed)"
            shutil.rmtree(name, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return exc.strerror or str(exc)
        return None
    finally:
        os.close(fd)


def _remove_as(identity: Identity, root: Path, parts: tuple[str, ...]) -> str | None:
    """:func:`_remove` in a forked child that has dropped to ``identity`` before touching anything."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os calls and shutil from here, then _exit
        answer: str | None
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(identity.gid)
            os.setuid(identity.uid)
            answer = _remove(root, parts)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, whatever it is
            answer = f"the removal as uid {identity.uid} failed: {exc}"
        try:
            os.write(write_end, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return f"the removal as uid {identity.uid} ended without an answer (status {status})"
    problem = json.loads(b"".join(chunks))
    if problem and "Permission denied" in problem:
        problem += f" for uid {identity.uid}, the experiment owner's identity"
    return problem


# --- what the master removes, and as whom -----------------------------------------------------------


def checkpoint_folder(storage: Mapping[str, Any], uuid: str) -> Path | None:
    """Where a checkpoint of an experiment with this ``checkpoint_storage`` lies on this machine:
    ``<host_path>/<storage_path>/<uuid>``, normalized without resolving links; None for storage
    whose files are not on this machine."""
    if storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return None
    base = os.path.join(str(storage["host_path"]), str(storage.get("storage_path") or ""))
    return Path(os.path.abspath(os.path.join(base, uuid)))


def roots_for(pool: str | None) -> tuple[Path, ...]:
    """The folders files may be removed under for an experiment of ``pool``: the checkpoint root,
    the trial work folder and the pool's ``allowed_host_paths``."""
    current = settings.load()
    return current.allowed_roots(current.policy_for(pool))


def owner_identity(conn: Connection, owner: str) -> Identity:
    """The identity an experiment owner's trials write files as: ``[det] trial_user`` when the
    admin set one (every user's trials run as it), else the owner's own uid."""
    configured = settings.load().trial_user
    if configured:
        try:
            entry = pwd.getpwnam(configured)
        except KeyError:
            return Identity(0, 0)  # refused by remove_tree: never root on a user's path
        return Identity(entry.pw_uid, entry.pw_gid)
    uid = identities.uid_for(conn, owner)
    return Identity(uid, uid)


def refused_checkpoints(
    experiment: Row, checkpoints: Sequence[tuple[str, Mapping[str, Any] | None]]
) -> tuple[list[str], list[str]]:
    """Which checkpoints of ``experiment`` (``(uuid, storage)`` pairs) may have their files removed:
    ``(uuids, not_removed lines)``.

    A ``shared_fs`` folder is removed only where the experiment's own storage puts that uuid and
    under the pool's roots, so a stored ``storage.path`` that says otherwise never takes anything
    else with it. An object store's checkpoint (s3, gcs, azure) lies under the experiment's own
    prefix. Other storage (a container's own ``directory``) has no files of a host to remove.
    """
    from det_airflow.object_storage import is_object_storage

    config = experiment.config.get("checkpoint_storage") or {}
    if is_object_storage(config):
        return [uuid for uuid, _ in checkpoints], []
    if config.get("type") != "shared_fs":
        return [], []
    roots = roots_for(experiment.resource_pool)
    uuids: list[str] = []
    not_removed: list[str] = []
    for uuid, storage in checkpoints:
        location = (storage or {}).get("path")
        expected = checkpoint_folder(config, uuid)
        if not location or expected is None or Path(os.path.abspath(location)) != expected:
            not_removed.append(f"checkpoint {uuid}: its files are not at a known path ({location!r})")
        elif problem := outside_roots(expected, roots, f"checkpoint {uuid}"):
            not_removed.append(problem)
        else:
            uuids.append(uuid)
    return uuids, not_removed


CHECKPOINTS = "checkpoints"
WORK_DIR = "work_dir"


def carry_out(removal: Removal) -> list[str]:
    """Remove the files of ``removal`` from this host (its own ``[det]`` roots and trial work
    folder); what was not removed, one line each. Never raises: a failure is such a line."""
    try:
        return _carry_out(removal)
    except Exception as exc:  # recorded with the removal, to be tried again
        return [f"{removal.kind} of experiment {removal.experiment_id}: {exc.__class__.__name__}: {exc}"]


def _carry_out(removal: Removal) -> list[str]:
    current = settings.load()
    if removal.kind == WORK_DIR:
        # The platform names this folder and made it (root-owned when the worker is root).
        work_dir = current.trial_work_dir
        own = work_dir / f"exp_{removal.experiment_id}"
        return remove_tree(own, [work_dir], "trial work directory", identity=None)
    from det_airflow.object_storage import is_object_storage

    config = removal.storage or {}
    if is_object_storage(config):
        return remove_stored_checkpoints(config, removal.uuids)
    identity = None
    if removal.uid is not None:  # the master queues both; no gid is the uid's own group, never root's
        identity = Identity(removal.uid, removal.gid if removal.gid is not None else removal.uid)
    roots = current.allowed_roots(current.policy_for(removal.pool))
    not_removed: list[str] = []
    for uuid in removal.uuids:
        folder = checkpoint_folder(config, uuid)
        if folder is None:
            not_removed.append(f"checkpoint {uuid}: its storage has no folder on a host")
            continue
        not_removed += remove_tree(folder, roots, f"checkpoint {uuid}", identity=identity)
    return not_removed


def remove_stored_checkpoints(config: Mapping[str, Any], uuids: Sequence[str]) -> list[str]:
    """Delete the objects of checkpoints ``uuids`` from the object store of an experiment's
    ``checkpoint_storage`` (only under its own prefix); what was not removed, one line each."""
    from det_airflow import object_storage

    try:
        storage = object_storage.open_storage(config)
    except DetError as exc:
        return [f"checkpoints {', '.join(uuids)}: {exc}"] if uuids else []
    not_removed = []
    for uuid in uuids:
        try:
            storage.delete(uuid)
        except DetError as exc:
            not_removed.append(f"checkpoint {uuid}: {exc}")
    return not_removed
