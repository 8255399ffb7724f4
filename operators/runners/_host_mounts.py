"""The host folders a Docker trial's container mounts, checked on what Docker will mount.

Docker resolves a bind mount's source path when it starts the container, following every link on
the way; a check made on the path earlier holds only if nobody can change the path in between. A
trial can: its own folder under the sticky checkpoint root is an entry it may rename, and a link it
puts in its place would carry the mount to ``/``. So each source is resolved once and handed to
Docker only in a form nobody but the platform can change:

- The admin's allowed folder (``checkpoint_storage_path``, ``trial_work_dir``, ``allowed_host_paths``)
  is resolved once (the admin's own links are followed); the rest of the path is walked from ``/``
  one component at a time without following a link (``O_PATH | O_NOFOLLOW``): a link anywhere below
  the allowed folder is refused, and so is a path that is not a folder.
- Docker gets the path as walked, link-free, and only if no trial identity can replace any of its
  components: the folder holding each one is owned by a platform identity and writable by no one
  else, or is sticky (as the checkpoint root) with the entry owned by a platform identity too.
- A folder a trial could replace is not mounted itself. One mounted at its own path (the work
  folder, the checkpoint storage) is reached through the nearest folder above it that no trial can
  replace, inside the allowed folder: a link put in its place is then resolved inside the
  container, against the container's own root, not the host's. A bind mount to another container
  path is refused, naming the folder that lets a trial replace it.

Platform identities are every uid but the trials': not the container's user, not ``[det]
trial_uid_range``, ``trial_user`` or ``nobody``. The check needs no privilege; a worker that is not
root, whose trials may run as its own uid, can give no such guarantee for its own folders.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from docker.types import Mount

from det_airflow.runner_policy import PolicyError, inside
from det_airflow.settings import Settings

# Who a trial without an assigned uid runs as on a root worker.
NOBODY_UID = 65534


@dataclass(frozen=True)
class HostMount:
    """One bind mount of a trial's container: host folder ``source`` at container path ``target``;
    ``field`` names where it was asked for (``bind_mounts[0].host_path``). ``within``: the one
    folder it may lie in, instead of the policy's (the work folder the platform made: itself)."""

    field: str
    source: str
    target: str
    read_only: bool = False
    propagation: str | None = None
    within: str | None = None

    def mount(self) -> Mount:
        return Mount(
            self.target, self.source, type="bind", read_only=self.read_only, propagation=self.propagation
        )


@dataclass(frozen=True)
class TrialIdentities:
    """The uids trial code may run as on this host: none of them may be able to change a mount's path."""

    first: int
    last: int
    others: frozenset[int] = frozenset()

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and (self.first <= uid <= self.last or uid in self.others)

    @classmethod
    def of(cls, settings: Settings, container_uid: int | None) -> TrialIdentities:
        others = {NOBODY_UID}
        if container_uid is not None:
            others.add(container_uid)
        if settings.trial_user:
            try:
                others.add(pwd.getpwnam(settings.trial_user).pw_uid)
            except KeyError:
                pass  # the local runner says so; no trial runs as a user that does not exist
        first, last = settings.trial_uid_range
        return cls(first, last, frozenset(others))


class _Unsafe(Exception):
    """A source that cannot be mounted as asked; the message says why, for the user."""


def checked(mounts: Sequence[HostMount], roots: Iterable[Path], trials: TrialIdentities) -> list[HostMount]:
    """``mounts`` as Docker must be given them: each source resolved once, inside an allowed folder
    of ``roots``, link-free and out of reach of ``trials``. Raises :class:`PolicyError` naming every
    mount that cannot be."""
    allowed = [PurePosixPath(os.path.normpath(os.path.abspath(r))) for r in roots]
    problems: list[tuple[str, str]] = []
    found: list[HostMount] = []
    for mount in mounts:
        try:
            found.append(_checked(mount, allowed, trials))
        except _Unsafe as exc:
            problems.append((mount.field, str(exc)))
    if problems:
        raise PolicyError(problems)
    return _merged(found)


def _checked(mount: HostMount, roots: Sequence[PurePosixPath], trials: TrialIdentities) -> HostMount:
    given = PurePosixPath(os.path.normpath(mount.source))
    placed = _placed(given, [PurePosixPath(mount.within)] if mount.within else roots)
    if placed is None:
        raise _Unsafe(
            f"host path {mount.source!r} is not under a folder the cluster's runner policy allows "
            f"({', '.join(str(r) for r in roots)})"
        )
    real, real_root = placed
    steady, why = walk(real, trials)
    if steady == real:
        return dataclasses.replace(mount, source=str(real))
    same_place = os.path.normpath(mount.target) == str(given)
    if same_place and inside(str(steady), str(real_root)):
        # Mounted at its own path: the container reaches the folder through `steady`, and resolves
        # whatever a trial puts in its place inside the container.
        up = len(real.parts) - len(steady.parts)
        return dataclasses.replace(
            mount, source=str(steady), target=str(PurePosixPath(mount.target).parents[up - 1])
        )
    raise _Unsafe(
        f"host path {mount.source!r} cannot be mounted safely: {why}, so it could be swapped for a link "
        "between the check and the mount; mount a folder that only the platform can change, or mount "
        "it at its own path"
    )


def _placed(
    given: PurePosixPath, roots: Sequence[PurePosixPath]
) -> tuple[PurePosixPath, PurePosixPath] | None:
    """``given`` with its allowed folder resolved (the admin's links followed once), and that
    folder; None when it lies under none."""
    for root in roots:
        real_root = PurePosixPath(os.path.realpath(root))
        for base in dict.fromkeys((root, real_root)):
            if inside(str(given), str(base)):
                return real_root / given.relative_to(base), real_root
    return None


def walk(path: PurePosixPath, trials: TrialIdentities) -> tuple[PurePosixPath, str | None]:
    """Walk ``path`` from ``/`` without following a link: the deepest prefix of it none of whose
    components a trial identity can replace, and why the next one can (None when all of ``path``
    is steady). Raises :class:`_Unsafe` when a component is a link, not a folder, or missing."""
    here = PurePosixPath("/")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        above = os.fstat(fd)
        steady, why = here, None
        for name in path.parts[1:]:
            here = here / name
            try:
                child = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                raise _Unsafe(f"host path {str(path)!r}: {here} does not exist") from None
            except OSError as exc:
                raise _Unsafe(f"host path {str(path)!r}: cannot open {here} ({exc.strerror})") from None
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                raise _Unsafe(
                    f"host path {str(path)!r}: {here} is a symbolic link; links are not followed below "
                    "an allowed folder, give the folder's own path"
                )
            if not stat.S_ISDIR(st.st_mode):
                raise _Unsafe(f"host path {str(path)!r}: {here} is not a folder")
            if why is None:
                why = _replaceable(here, above, st, trials)
                if why is None:
                    steady = here
            above = st
        return steady, why
    finally:
        os.close(fd)


def _replaceable(
    here: PurePosixPath, parent: os.stat_result, entry: os.stat_result, trials: TrialIdentities
) -> str | None:
    """Why a trial identity could rename or remove ``here`` (an entry ``entry`` of folder
    ``parent``) and put something else there; None when none can."""
    mode = stat.S_IMODE(parent.st_mode)
    if parent.st_uid in trials:
        return f"{here.parent} belongs to uid {parent.st_uid}, a trial's identity"
    if not mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    if mode & stat.S_ISVTX:
        # Sticky: only the entry's owner (and the folder's) may rename or remove it.
        if entry.st_uid in trials:
            return f"{here} belongs to uid {entry.st_uid}, a trial's identity, in the shared folder {here.parent}"
        return None
    return f"{here.parent} may be written by others (mode {mode:04o})"


def _merged(mounts: list[HostMount]) -> list[HostMount]:
    """One mount per container path: two asked for the same folder (a storage folder inside the
    checkpoint root, mounted through the root) become one, writable if either is."""
    merged: dict[str, HostMount] = {}
    for mount in mounts:
        known = merged.get(mount.target)
        if known is None:
            merged[mount.target] = mount
        elif known.source == mount.source:
            merged[mount.target] = dataclasses.replace(known, read_only=known.read_only and mount.read_only)
        else:
            raise PolicyError(
                [(mount.field, f"container path {mount.target!r} is also the target of {known.field}")]
            )
    return list(merged.values())
