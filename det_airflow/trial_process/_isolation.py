"""Who a trial process runs as: an unprivileged OS identity, and the folders it may reach.

A worker that is root starts each trial as the identity the master assigned to the experiment's
owner (or the admin's ``[det] trial_user``), never as root; these functions choose that identity,
hand the trial's work folder to it, and check, before anything starts, that it can run this Python
and write its checkpoints (docs/trial-isolation.md).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from det_airflow.errors import DetError

# The user trials run as when the worker is root and `[det] trial_user` is not set.
DEFAULT_TRIAL_USER = "det-trial"


class TrialIsolationError(DetError):
    """A trial cannot be started as the unprivileged user it must run as."""


@dataclass(frozen=True)
class TrialUser:
    """The unprivileged user a trial process runs as."""

    name: str
    uid: int
    gid: int


def trial_user(
    configured: str | None = None, *, uid: int | None = None, gid: int | None = None
) -> TrialUser | None:
    """The user trials run as: ``configured`` (``[det] trial_user``, the admin's override: every
    user's trials under that one identity), else, when this process is root, the numeric ``uid``
    and ``gid`` the master assigned to the experiment's owner (no ``/etc/passwd`` entry needed),
    else :data:`DEFAULT_TRIAL_USER` (created with ``useradd`` if missing); None means this
    process's own user (a worker that is not root and sets no trial user)."""
    is_root = os.geteuid() == 0
    if configured and not is_root:
        raise TrialIsolationError(
            f"[det] trial_user = {configured}: the worker runs as uid {os.geteuid()}, not root, and cannot "
            "start processes as another user; run the worker as root or remove trial_user"
        )
    if not is_root:
        return None
    if not configured and uid is not None:
        if uid == 0 or gid == 0:
            raise TrialIsolationError(
                "the master assigned uid 0 to the experiment's owner; trials never run as root"
            )
        return TrialUser(f"det-{uid}", uid, uid if gid is None else gid)
    name = configured or DEFAULT_TRIAL_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if configured:
            raise TrialIsolationError(
                f"[det] trial_user = {name}: no such user on this machine; create it "
                f"(useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {name}) "
                "or remove trial_user"
            ) from None
        entry = _create_default_user(name)
    if entry.pw_uid == 0:
        raise TrialIsolationError(
            f"[det] trial_user = {name}: trials must not run as root; name an unprivileged user"
        )
    return TrialUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def hand_over(workdir: str | os.PathLike[str], user: TrialUser) -> None:
    """Give ``workdir`` and everything in it to ``user``, readable by no one else."""
    root = Path(workdir)
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), user.uid, user.gid, follow_symlinks=False)
    os.chown(root, user.uid, user.gid)
    root.chmod(0o700)


def make_passable_dirs(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its missing parents) with mode 0711: another user may pass through to
    a folder whose name it knows, but may not list or read them."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        folder.chmod(0o711)
    return path


def prepare_checkpoint_root(root: str | os.PathLike[str]) -> Path:
    """Create the platform's checkpoint root, or set it right: root-owned, mode 1733 (sticky).

    Every trial identity may create its checkpoint folders in it, none may list it, nor remove or
    rename another's. Only this folder is made by the platform; what lies inside is made by the
    trials, as their own identity. For a worker that is root."""
    root = Path(os.path.abspath(root))
    if not root.exists():
        make_passable_dirs(root.parent)
        root.mkdir(exist_ok=True)
    st = os.stat(root, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise TrialIsolationError(f"[det] checkpoint_storage_path {root} is not a folder")
    if (st.st_uid, st.st_gid) != (0, 0):
        os.chown(root, 0, 0, follow_symlinks=False)
    if stat.S_IMODE(st.st_mode) != 0o1733:
        root.chmod(0o1733)
    return root


def make_dirs_as(path: str | os.PathLike[str], user: TrialUser | None) -> None:
    """Create ``path`` and its missing parents as ``user`` (a child process that has dropped to it),
    so that a folder a trial's config named is made with the trial's own rights, never root's.
    With no ``user`` (a worker that is not root) this process creates it as itself."""
    if user is None:
        Path(path).mkdir(parents=True, exist_ok=True)
        return
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.makedirs(sys.argv[1], mode=0o700, exist_ok=True)",
            str(path),
        ],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        reason = (made.stderr.strip().splitlines() or ["no message"])[-1]
        raise TrialIsolationError(f"trial user {user.name} cannot create {path}: {reason}")


def check_can_write(path: str | os.PathLike[str], user: TrialUser) -> None:
    """Fail early, naming the folder and the fix, when ``user`` could not write its checkpoints in
    ``path``. A missing ``path`` is not created here: the trial creates it as its own identity, so
    the nearest folder that exists must let it. Nothing is created or handed over as root."""
    path = Path(os.path.abspath(path))
    existing = next(p for p in (path, *path.parents) if p.exists())
    for folder in reversed(existing.parents):
        mode = folder.stat()
        if not _allows(mode, user, os.X_OK):
            raise TrialIsolationError(
                f"trial user {user.name} cannot reach {path}: it may not pass through {folder} "
                f"(mode {stat.filemode(mode.st_mode)}, owner uid {mode.st_uid}); choose another "
                "checkpoint_storage.host_path or let others pass: chmod o+x "
                f"{folder}"
            )
    if not _allows(existing.stat(), user, os.W_OK | os.X_OK):
        what = f"write to {path}" if existing == path else f"create {path} (in {existing})"
        raise TrialIsolationError(
            f"trial user {user.name} cannot {what}: make it writable by uid {user.uid} or choose "
            "another checkpoint_storage.host_path"
        )


def ensure_writable_dir(path: str | os.PathLike[str], user: TrialUser, *, adopt: bool = False) -> None:
    """Make sure ``user`` can write its checkpoints in ``path``. With ``adopt`` (``path`` is the
    platform's checkpoint root) the root is created or set right (:func:`prepare_checkpoint_root`);
    any other folder is never created nor handed over as root (:func:`check_can_write`)."""
    if adopt:
        prepare_checkpoint_root(path)
    check_can_write(path, user)


def check_trial_access(user: TrialUser, *, read: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Fail early, naming the folder and the fix, when ``user`` cannot reach one of ``read``
    (every folder above it must let the user pass, and the path itself must be readable)."""
    # Both the path as named and where its links lead (a venv's python links to the base one).
    paths = dict.fromkeys(p for t in read for p in (Path(t).absolute(), Path(t).resolve()))
    for path in paths:
        for folder in reversed(path.parents):
            mode = folder.stat()
            if not _allows(mode, user, os.X_OK):
                raise TrialIsolationError(
                    f"trial user {user.name} cannot reach {path}: it may not pass through {folder} "
                    f"(mode {stat.filemode(mode.st_mode)}, owner uid {mode.st_uid}). Allow passing "
                    f"through only, without listing: chmod o+x {folder} (running "
                    "'python -m det_airflow.localairflow init' as root does this for the interpreter "
                    "and the Airflow home)"
                )
        if not _allows(path.stat(), user, os.R_OK):
            raise TrialIsolationError(
                f"trial user {user.name} cannot read {path} (mode {stat.filemode(path.stat().st_mode)}); "
                f"make it readable by others: chmod o+r {path}"
            )


def interpreter_paths() -> list[Path]:
    """What a trial needs to run this Python with det-airflow: the interpreter, its standard
    library and det-airflow itself."""
    import det_airflow

    return [
        Path(sys.executable),
        Path(os.__file__).parent,
        Path(det_airflow.__file__).parent,
    ]


def _allows(st: os.stat_result, user: TrialUser, bits: int) -> bool:
    """Whether the mode bits of ``st`` grant ``user`` all of ``bits`` (os.R_OK, W_OK, X_OK).

    The trial keeps only its primary group, so that is the only group that counts."""
    if st.st_uid == user.uid:
        granted = st.st_mode >> 6
    elif st.st_gid == user.gid:
        granted = st.st_mode >> 3
    else:
        granted = st.st_mode
    return granted & bits == bits


def _create_default_user(name: str) -> pwd.struct_passwd:
    """Create the dedicated trial user (a system user with no home and no login shell)."""
    command = [
        "useradd",
        "--system",
        "--user-group",
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        name,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except OSError as exc:
        raise TrialIsolationError(
            f"cannot create the trial user {name} ({' '.join(command)}: {exc.strerror or exc}); create it "
            "yourself or set [det] trial_user to an existing unprivileged user"
        ) from None
    try:
        return pwd.getpwnam(name)  # another worker may have created it at the same moment
    except KeyError:
        raise TrialIsolationError(
            f"cannot create the trial user {name}: {' '.join(command)} said {result.stderr.strip()!r}; "
            "create it yourself or set [det] trial_user to an existing unprivileged user"
        ) from None
