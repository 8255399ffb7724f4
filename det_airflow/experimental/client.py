"""The part of Determined's ``experimental.client`` that user code uses: fetching checkpoints and
the model registry.

Checkpoints are read inside a trial through the trial's master, elsewhere through the local store
(the same place ``core.init()`` writes). The model registry is the master's: its calls go to
``login()``'s master (default ``DET_MASTER``) as the ``det user login`` user, or ``DET_USER`` /
``DET_PASS``. Managing experiments and trials is the ``det`` CLI's job.

Example::

    from determined.experimental import client

    path = client.get_checkpoint(uuid).download()
    model = client.create_model("mnist")
    version = model.register_version(uuid)
"""

from __future__ import annotations

import enum
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_airflow import core

if TYPE_CHECKING:
    from det_airflow.api import models as wire
    from det_airflow.api.user import UserClient

_login: tuple[str | None, str | None, str | None] = (None, None, None)


def login(
    master: str | None = None,
    user: str | None = None,
    password: str | None = None,
    cert_path: str | None = None,
    noverify: bool = False,
) -> None:
    """The master and user of the model registry's calls (checkpoints need no login: a trial is
    already authenticated, and the local store needs none)."""
    global _login
    _login = (master, user, password)


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


# --- the model registry ---------------------------------------------------------------------------


class ModelSortBy(enum.Enum):
    """What ``get_models`` sorts by."""

    NAME = "name"
    DESCRIPTION = "description"
    CREATION_TIME = "creation_time"
    LAST_UPDATED_TIME = "last_updated_time"


class ModelOrderBy(enum.Enum):
    ASCENDING = "asc"
    ASC = "asc"
    DESCENDING = "desc"
    DESC = "desc"


def _registry() -> UserClient:
    """A client of ``login()``'s master as its user; else of ``DET_MASTER`` as ``det``'s login."""
    from det_airflow.api.user import UserClient, connect, connect_as, login

    master, user, password = _login
    master = master or os.environ.get("DET_MASTER")
    if user is not None and password is not None:
        return UserClient(master, login(master, user, password))
    if user is not None:
        return connect_as(master, user)
    return connect(master)


class ModelVersion:
    """A checkpoint registered as version ``model_version`` of model ``model_name``."""

    def __init__(self, answer: wire.ModelVersion) -> None:
        self._set(answer)

    def _set(self, answer: wire.ModelVersion) -> None:
        self.model_version_id = answer.id
        self.model_version = answer.version
        self.model_id = answer.model_id
        self.model_name = answer.model_name
        self.checkpoint = Checkpoint(answer.checkpoint.uuid)
        self.name = answer.name
        self.comment = answer.comment
        self.notes = answer.notes
        self.metadata = dict(answer.metadata)
        self.labels = list(answer.labels)
        self.creation_time = answer.creation_time
        self.validation_metrics = dict(answer.validation_metrics)

    def _update(self, **changes: Any) -> None:
        with _registry() as client:
            # By ID: a model's name is unique only per owner.
            self._set(client.update_model_version(str(self.model_id), self.model_version, **changes))

    def set_name(self, name: str) -> None:
        self._update(name=name)

    def set_notes(self, notes: str) -> None:
        self._update(notes=notes)

    def set_comment(self, comment: str) -> None:
        self._update(comment=comment)

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        self._update(metadata={**self.metadata, **metadata})

    def remove_metadata(self, keys: list[str]) -> None:
        self._update(metadata={k: v for k, v in self.metadata.items() if k not in keys})

    def set_labels(self, labels: list[str]) -> None:
        self._update(labels=list(labels))

    def delete(self) -> None:
        with _registry() as client:
            client.delete_model_version(str(self.model_id), self.model_version)

    def __repr__(self) -> str:
        return f"ModelVersion(model_name={self.model_name!r}, model_version={self.model_version})"


class Model:
    """A model of the registry; its versions are checkpoints."""

    def __init__(self, answer: wire.Model) -> None:
        self._set(answer)

    def _set(self, answer: wire.Model) -> None:
        self.model_id = answer.id
        self.name = answer.name
        self.description = answer.description
        self.notes = answer.notes
        self.metadata = dict(answer.metadata)
        self.labels = list(answer.labels)
        self.archived = answer.archived
        self.creation_time = answer.creation_time
        self.last_updated_time = answer.last_updated_time

    def _update(self, **changes: Any) -> None:
        with _registry() as client:
            self._set(client.update_model(str(self.model_id), **changes))

    def get_version(self, version: int = -1) -> ModelVersion | None:
        """Version ``version``; -1 (or 0): the latest. None when the model has no such version."""
        from det_airflow.errors import APIError

        with _registry() as client:
            try:
                return ModelVersion(client.get_model_version(str(self.model_id), max(version, 0)))
            except APIError as exc:
                if exc.status_code == 404:
                    return None
                raise

    def get_versions(self, order_by: ModelOrderBy = ModelOrderBy.DESC) -> list[ModelVersion]:
        """The model's versions, the latest first unless ``order_by`` is ascending."""
        with _registry() as client:
            answer = client.list_model_versions(str(self.model_id), descending=order_by.value == "desc")
        return [ModelVersion(v) for v in answer.model_versions]

    def register_version(self, checkpoint_uuid: str) -> ModelVersion:
        """Register the checkpoint as the model's next version; it is kept from then on."""
        with _registry() as client:
            version = ModelVersion(client.register_model_version(str(self.model_id), checkpoint_uuid))
            self._set(client.get_model(str(self.model_id)))
        return version

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        self._update(metadata={**self.metadata, **metadata})

    def remove_metadata(self, keys: list[str]) -> None:
        self._update(metadata={k: v for k, v in self.metadata.items() if k not in keys})

    def add_label(self, label: str) -> None:
        self._update(labels=[*self.labels, label])

    def remove_label(self, label: str) -> None:
        self._update(labels=[x for x in self.labels if x != label])

    def set_labels(self, labels: list[str]) -> None:
        self._update(labels=list(labels))

    def set_description(self, description: str) -> None:
        self._update(description=description)

    def set_notes(self, notes: str) -> None:
        self._update(notes=notes)

    def archive(self) -> None:
        with _registry() as client:
            self._set(client.set_model_archived(str(self.model_id), True))

    def unarchive(self) -> None:
        with _registry() as client:
            self._set(client.set_model_archived(str(self.model_id), False))

    def delete(self) -> None:
        with _registry() as client:
            client.delete_model(str(self.model_id))

    def __repr__(self) -> str:
        return f"Model(name={self.name!r})"


def create_model(
    name: str,
    description: str | None = "",
    metadata: dict[str, Any] | None = None,
    labels: list[str] | None = None,
) -> Model:
    with _registry() as client:
        answer = client.create_model(
            name, description=description or "", metadata=metadata or {}, labels=labels or []
        )
    return Model(answer)


def get_model(identifier: str | int) -> Model:
    """The model with this name, or with this ID."""
    with _registry() as client:
        return Model(client.get_model(str(identifier)))


def get_model_by_id(model_id: int) -> Model:
    return get_model(model_id)


def get_models(
    sort_by: ModelSortBy = ModelSortBy.NAME,
    order_by: ModelOrderBy = ModelOrderBy.ASCENDING,
    name: str = "",
    labels: list[str] | None = None,
) -> list[Model]:
    """The models whose name contains ``name`` and that carry every one of ``labels``."""
    with _registry() as client:
        answers = client.list_models(name=name or None, sort_by=sort_by.value, order_by=order_by.value)
    wanted = set(labels or [])
    return [Model(a) for a in answers if wanted <= set(a.labels)]


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"determined.experimental.client.{name}: det-airflow's client offers login(), "
        "get_checkpoint() and the model registry (create_model, get_model, get_models); use the "
        "det CLI to manage experiments"
    )
