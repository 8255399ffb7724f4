"""The part of Determined's ``experimental.client`` that training code uses: fetching checkpoints.

Inside a trial it reads through the trial's master; elsewhere through the local store (the same
place ``core.init()`` writes). Managing experiments, trials and models is the ``det`` CLI's job.

Example::

    from determined.experimental import client

    path = client.get_checkpoint(uuid).download()
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det_airflow import core


def login(
    master: str | None = None,
    user: str | None = None,
    password: str | None = None,
    cert_path: str | None = None,
    noverify: bool = False,
) -> None:
    """Accepted: a trial is already authenticated, and the local store needs no login."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint, by its UUID."""

    uuid: str

    @property
    def metadata(self) -> dict[str, Any]:
        with core.init() as context:
            metadata = context.checkpoint.get_metadata(self.uuid)
        return metadata

    def download(self, path: str | None = None, mode: Any = None) -> str:
        """Copy the checkpoint's files into ``path`` (default: a new temporary folder); answers it."""
        target = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix=f"checkpoint-{self.uuid}-"))
        with core.init() as context:
            context.checkpoint.download(self.uuid, target)
        return str(target)


def get_checkpoint(uuid: str) -> Checkpoint:
    """The checkpoint with this UUID (its files are read on ``download()``)."""
    return Checkpoint(uuid)


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"determined.experimental.client.{name}: det-airflow's client offers login() and "
        "get_checkpoint(); use the det CLI to manage experiments"
    )
