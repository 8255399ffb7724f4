"""A trial's ``TMPDIR`` on this host: a short folder of its own, made for one run and removed after it.

Programs put AF_UNIX sockets under ``TMPDIR`` (Ray's session folder, NCCL, multiprocessing's
managers), and a socket's path holds at most 107 bytes. A folder in the trial's work folder
(``<[det] trial_work_dir>/exp_N/trial_M/.det/tmp``) leaves too little of that: Ray's
``ray/session_<time>_<pid>/sockets/plasma_store`` alone is about 65 bytes. So the trial's
``TMPDIR`` is ``det-`` and eight random characters in the worker's temporary folder, ``/tmp`` when
that one's path is long: at most :data:`MAX_TMPDIR_LENGTH` characters.

Other users' trials share that temporary folder, so the name comes from :func:`tempfile.mkdtemp`:
random, and made by one ``mkdir`` that fails if anything (a folder, a link) already has the name,
so no one can make it first and wait for the trial to use it. It is made with mode 0700 and given to
the trial's user before the trial starts, and removed when its run ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from det_airflow.trial_process._isolation import TrialIsolationError, TrialUser, check_trial_access

# A trial's TMPDIR is at most this long: a socket path of 74 bytes below it still fits in 107.
MAX_TMPDIR_LENGTH = 32
PREFIX = "det-"
# mkdtemp's random part.
_RANDOM_LENGTH = 8
# Where the folder goes when the worker's own temporary folder has a long path.
_SHORT_BASE = "/tmp"


def make_private_tmpdir(user: TrialUser | None = None) -> Path:
    """Make a trial's ``TMPDIR``: a new folder, mode 0700, owned by ``user`` (None: this process's
    user), at most :data:`MAX_TMPDIR_LENGTH` characters long. Remove it with
    :func:`remove_private_tmpdir` when the run ends."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, PREFIX)) + _RANDOM_LENGTH > MAX_TMPDIR_LENGTH:
        base = _SHORT_BASE
    try:
        path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    except OSError as exc:
        raise TrialIsolationError(
            f"cannot make the trial's temporary folder in {base}: {exc.strerror or exc}"
        ) from None
    if user is None:
        return path
    try:
        # The folder is new and only this process may reach it until it is handed over.
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
        check_trial_access(user, read=[path])
    except BaseException:
        remove_private_tmpdir(path)
        raise
    return path


def remove_private_tmpdir(path: str | os.PathLike[str]) -> None:
    """Remove a trial's ``TMPDIR`` and everything the trial left in it.

    ``shutil.rmtree`` walks by file descriptors and never follows links, so a link the trial left
    there cannot make a root worker remove anything outside. Folders the trial made unwritable are
    opened up first when the worker is not root (then the trial ran as the worker's own user)."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or path.is_symlink():
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for folder, dirs, _files in os.walk(path):  # top-down: a folder is opened before it is entered
        for name in dirs:
            child = os.path.join(folder, name)
            if not os.path.islink(child):
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700)
    shutil.rmtree(path, ignore_errors=True)
