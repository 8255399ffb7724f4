"""Test folders laid out as a root master finds them: the checkpoint root root-owned 1733, each
checkpoint folder the experiment owner's (the uid the master allocated), the way there passable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from det_airflow.master import identities
from det_airflow.master.db import Database


def passable(path: Path) -> None:
    """Let any uid pass through ``path`` and the folders above it (pytest's are 0700)."""
    for folder in (path, *path.parents):
        mode = stat.S_IMODE(folder.stat().st_mode)
        if not mode & 0o001:
            folder.chmod(mode | 0o001)


def checkpoint_root(path: Path) -> Path:
    """``path`` made the way the platform makes the checkpoint root."""
    path.mkdir(parents=True, exist_ok=True)
    passable(path.parent)
    path.chmod(0o1733)
    return path


def owned_by(db: Database, owner: str, folder: Path) -> Path:
    """Give ``folder`` and all in it to ``owner``'s uid, as if a trial of theirs had written it."""
    if os.geteuid() != 0:
        return folder
    with db.begin() as conn:
        uid = identities.uid_for(conn, owner)
    for path in (folder, *folder.rglob("*")):
        os.chown(path, uid, uid, follow_symlinks=False)
    return folder
