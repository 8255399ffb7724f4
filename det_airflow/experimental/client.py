"""Determined's ``experimental.client`` for user code: experiments and trials of the master,
their metrics, checkpoints and the model registry.

``create_experiment`` packs ``model_dir`` as ``det experiment create`` does and returns an
``Experiment`` (``wait()``, ``kill()``, ``pause()``, ``activate()``, ``list_trials()``,
``list_checkpoints()``...); ``get_experiment``, ``list_experiments``, ``get_trial`` and
``iter_trials_metrics`` read the master. The module's functions go to ``login()``'s master (default
``DET_MASTER``) as the ``det user login`` user, or ``DET_USER`` / ``DET_PASS``; a ``Determined(master,
user, password)`` object offers the same functions for another master or user. Errors of the master
are ``det_airflow.errors.APIError`` with its ``status_code`` (404: no such experiment or trial).

The checkpoints these calls return (``list_checkpoints()``, ``Determined.get_checkpoint``, a model
version's) read their files off-cluster as ``det checkpoint download`` does (``download(path,
mode=DownloadMode.AUTO)``: a mounted folder directly, object storage through the master); the
module's ``get_checkpoint(uuid)`` reads the local store (where ``core.init()`` writes off-cluster).
In a trial, checkpoints are read through the trial's master.

Example::

    from determined.experimental import client

    exp = client.create_experiment("const.yaml", model_dir=".")
    state = exp.wait()
    best = exp.list_checkpoints(max_results=1)[0]
    for report in client.iter_trials_metrics([t.id for t in exp.list_trials()], group="validation"):
        print(report.trial_id, report.steps_completed, report.metrics)
    model = client.create_model("mnist")
    version = model.register_version(best.uuid)
"""

from __future__ import annotations

import base64
import contextlib
import enum
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_airflow.core._train import TRAINING, VALIDATION
from det_airflow.experimental._client_checkpoints import (
    Checkpoint,
    CheckpointSortBy,
    DownloadMode,
    OrderBy,
    nulls_last,
)
from det_airflow.experimental._client_checkpoints import Connector as _Connector
from det_airflow.experimental._client_experiment import Experiment, ExperimentSortBy, experiment_key
from det_airflow.experimental._client_metrics import (
    TrainingMetrics,
    TrialMetrics,
    ValidationMetrics,
    trials_metrics,
)
from det_airflow.experimental._client_trial import LogLevel, Trial, TrialSortBy
from det_airflow.states import ExperimentState, TrialState

if TYPE_CHECKING:
    from det_airflow.api import models as wire
    from det_airflow.api.user import UserClient

__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentSortBy",
    "ExperimentState",
    "LogLevel",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "TrainingMetrics",
    "Trial",
    "TrialMetrics",
    "TrialSortBy",
    "TrialState",
    "ValidationMetrics",
    "create_experiment",
    "create_model",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_model_by_id",
    "get_models",
    "get_trial",
    "iter_trials_metrics",
    "list_experiments",
    "login",
    "stream_trials_metrics",
    "stream_trials_training_metrics",
    "stream_trials_validation_metrics",
]

logger = logging.getLogger("determined.client")

# Determined's deprecated names of ``OrderBy``.
ExperimentOrderBy = TrialOrderBy = CheckpointOrderBy = OrderBy

_login: tuple[str | None, str | None, str | None] = (None, None, None)
_determined: Determined | None = None


def login(
    master: str | None = None,
    user: str | None = None,
    password: str | None = None,
    cert_path: str | None = None,
    cert_name: str | None = None,
    noverify: bool = False,
) -> None:
    """The master and user of the module's calls from now on (checkpoints need no login: a trial
    is already authenticated, and the local store needs none). ``cert_path``, ``cert_name`` and
    ``noverify`` are accepted; TLS trust comes from ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``."""
    global _login, _determined
    _login = (master, user, password)
    _determined = None  # the next call connects as the new login


def _connect(master: str | None, user: str | None, password: str | None) -> UserClient:
    """A client of ``master`` (default ``DET_MASTER``) as ``user`` with ``password``; as ``user``'s
    stored login without one; as ``det``'s login (or ``DET_USER`` / ``DET_PASS``) without a user."""
    from det_airflow.api.user import UserClient, connect, connect_as, login

    master = master or os.environ.get("DET_MASTER")
    if user is not None and password is not None:
        name, secret = user, password
        return UserClient(master, login(master, name, secret), relogin=lambda: login(master, name, secret))
    if user is not None:
        return connect_as(master, user)
    return connect(master)


def _default() -> Determined:
    """The ``Determined`` of ``login()``'s master and user, made on first use."""
    global _determined
    if _determined is None:
        _determined = Determined(*_login)
    return _determined


def get_checkpoint(uuid: str) -> Checkpoint:
    """The checkpoint with this UUID (its files are read on ``download()``: in a trial through the
    trial's master, elsewhere from the local store; ``Determined(...).get_checkpoint`` reads one of
    the master)."""
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
    return _connect(*_login)


class ModelVersion:
    """A checkpoint registered as version ``model_version`` of model ``model_name``."""

    def __init__(self, answer: wire.ModelVersion, connect: _Connector | None = None) -> None:
        self._connect = connect or _registry
        self._set(answer)

    def _set(self, answer: wire.ModelVersion) -> None:
        self.model_version_id = answer.id
        self.model_version = answer.version
        self.model_id = answer.model_id
        self.model_name = answer.model_name
        self.checkpoint = Checkpoint(answer.checkpoint.uuid, self._connect)
        self.name = answer.name
        self.comment = answer.comment
        self.notes = answer.notes
        self.metadata = dict(answer.metadata)
        self.labels = list(answer.labels)
        self.creation_time = answer.creation_time
        self.validation_metrics = dict(answer.validation_metrics)

    def _update(self, **changes: Any) -> None:
        with self._connect() as client:
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
        with self._connect() as client:
            client.delete_model_version(str(self.model_id), self.model_version)

    def __repr__(self) -> str:
        return f"ModelVersion(model_name={self.model_name!r}, model_version={self.model_version})"


class Model:
    """A model of the registry; its versions are checkpoints."""

    def __init__(self, answer: wire.Model, connect: _Connector | None = None) -> None:
        self._connect = connect or _registry
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
        with self._connect() as client:
            self._set(client.update_model(str(self.model_id), **changes))

    def get_version(self, version: int = -1) -> ModelVersion | None:
        """Version ``version``; -1 (or 0): the latest. None when the model has no such version."""
        from det_airflow.errors import APIError

        with self._connect() as client:
            try:
                return ModelVersion(
                    client.get_model_version(str(self.model_id), max(version, 0)), self._connect
                )
            except APIError as exc:
                if exc.status_code == 404:
                    return None
                raise

    def get_versions(self, order_by: ModelOrderBy = ModelOrderBy.DESC) -> list[ModelVersion]:
        """The model's versions, the latest first unless ``order_by`` is ascending."""
        with self._connect() as client:
            answer = client.list_model_versions(str(self.model_id), descending=order_by.value == "desc")
        return [ModelVersion(v, self._connect) for v in answer.model_versions]

    def register_version(self, checkpoint_uuid: str) -> ModelVersion:
        """Register the checkpoint as the model's next version; it is kept from then on."""
        with self._connect() as client:
            version = ModelVersion(
                client.register_model_version(str(self.model_id), checkpoint_uuid), self._connect
            )
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
        with self._connect() as client:
            self._set(client.set_model_archived(str(self.model_id), True))

    def unarchive(self) -> None:
        with self._connect() as client:
            self._set(client.set_model_archived(str(self.model_id), False))

    def delete(self) -> None:
        with self._connect() as client:
            client.delete_model(str(self.model_id))

    def __repr__(self) -> str:
        return f"Model(name={self.name!r})"


def create_model(
    name: str,
    description: str | None = "",
    metadata: dict[str, Any] | None = None,
    labels: list[str] | None = None,
) -> Model:
    return _create_model(_registry, name, description, metadata, labels)


def get_model(identifier: str | int) -> Model:
    """The model with this name, or with this ID."""
    return _get_model(_registry, identifier)


def get_model_by_id(model_id: int) -> Model:
    return get_model(model_id)


def get_models(
    sort_by: ModelSortBy = ModelSortBy.NAME,
    order_by: ModelOrderBy = ModelOrderBy.ASCENDING,
    name: str = "",
    labels: list[str] | None = None,
) -> list[Model]:
    """The models whose name contains ``name`` and that carry every one of ``labels``."""
    return _get_models(_registry, sort_by, order_by, name, labels)


def _create_model(
    connect: _Connector,
    name: str,
    description: str | None,
    metadata: dict[str, Any] | None,
    labels: list[str] | None,
) -> Model:
    with connect() as client:
        answer = client.create_model(
            name, description=description or "", metadata=metadata or {}, labels=labels or []
        )
    return Model(answer, connect)


def _get_model(connect: _Connector, identifier: str | int) -> Model:
    with connect() as client:
        return Model(client.get_model(str(identifier)), connect)


def _get_models(
    connect: _Connector, sort_by: ModelSortBy, order_by: Any, name: str, labels: list[str] | None
) -> list[Model]:
    with connect() as client:
        answers = client.list_models(name=name or None, sort_by=sort_by.value, order_by=order_by.value)
    wanted = set(labels or [])
    return [Model(a, connect) for a in answers if wanted <= set(a.labels)]


# --- experiments and trials -----------------------------------------------------------------------


class Determined:
    """A connection to a master as one user, with the module's functions as its methods (for a
    second master or user; the module's functions use ``login()``'s).

    Args:
        master: ``host:port`` or a URL; default ``DET_MASTER``.
        user: Who to act as; default the ``det user login`` user (or ``DET_USER``).
        password: ``user``'s password; without one, the token ``det -u USER`` stored for ``user``,
            or ``DET_PASS`` when ``DET_USER`` names the same user.
        cert_path, cert_name, noverify: Accepted; TLS trust comes from ``SSL_CERT_FILE`` /
            ``SSL_CERT_DIR``.

    Raises:
        APIError: The login failed: a wrong password, or the master cannot be reached.
    """

    def __init__(
        self,
        master: str | None = None,
        user: str | None = None,
        password: str | None = None,
        cert_path: str | None = None,
        cert_name: str | None = None,
        noverify: bool = False,
    ) -> None:
        self._session = _connect(master, user, password)

    @classmethod
    def _from_session(cls, session: UserClient) -> Determined:
        determined = cls.__new__(cls)
        determined._session = session
        return determined

    def _use(self) -> AbstractContextManager[UserClient]:
        return contextlib.nullcontext(self._session)

    def get_session_username(self) -> str:
        """The user the master knows this connection as."""
        return self._session.whoami()

    def create_experiment(
        self,
        config: str | os.PathLike[str] | dict[str, Any],
        model_dir: str | os.PathLike[str] | None = None,
        includes: Iterable[str | os.PathLike[str]] | None = None,
        project_id: int | None = None,
        template: str | None = None,
    ) -> Experiment:
        """Creates an experiment, as ``det experiment create`` does, and returns it (active).

        Args:
            config: The experiment config: a YAML file's path, or a dict.
            model_dir: The folder of the training code (the context), packed honouring
                ``.detignore``.
            includes: More files or folders to pack with it, at its top level.
            project_id: The project to create it in.
            template: A config template the master lays under ``config``.

        Raises:
            ConfigError: The config cannot be read or is invalid (every problem, with its field).
            ContextError: ``model_dir`` cannot be packed.
            APIError: The master refused the experiment.
        """
        text = _config_text(config, check=template is None)
        context = None
        if model_dir is not None:
            from det_airflow.context_archive import pack_context

            packed = pack_context(model_dir, includes=includes or ())
            context = base64.b64encode(packed.data).decode("ascii")
        elif includes:
            from det_airflow.errors import DetError

            raise DetError("includes: give model_dir too, the folder they are packed with")
        answer = self._session.create_experiment(text, context, template=template, project_id=project_id)
        return Experiment._from_wire(answer, self._session)

    def get_experiment(self, experiment_id: int) -> Experiment:
        """The experiment with this ID.

        Raises:
            APIError: None has it (``status_code`` 404), or the user may not read it.
        """
        return Experiment._from_detail(self._session.get_experiment(experiment_id), self._session)

    def list_experiments(
        self,
        sort_by: ExperimentSortBy | None = None,
        order_by: OrderBy | None = None,
        experiment_ids: list[int] | None = None,
        labels: list[str] | None = None,
        users: list[str] | None = None,
        states: list[ExperimentState] | None = None,
        name: str | None = None,
        project_id: int | None = None,
    ) -> list[Experiment]:
        """The experiments the user may read (archived ones too) that pass every filter given.

        Args:
            sort_by: What to sort by (default: ID); experiments without it come last.
            order_by: Ascending (default) or descending.
            experiment_ids: Only these.
            labels: Only those carrying every one of these labels.
            users: Only those owned by these users.
            states: Only those in these states.
            name: Only those whose name contains this (any case).
            project_id: Only those of this project.
        """
        if project_id is not None:
            answers = self._session.list_project_experiments(project_id, all=True)
        else:
            answers = self._session.list_experiments(all=True)
        ids = set(experiment_ids) if experiment_ids is not None else None
        wanted_labels = set(labels or [])
        owners = set(users) if users else None
        wanted_states = {ExperimentState(s) for s in states} if states else None
        part = name.casefold() if name else None
        kept = [
            a
            for a in answers
            if (ids is None or a.id in ids)
            and wanted_labels <= set(a.labels)
            and (owners is None or a.owner in owners)
            and (wanted_states is None or a.state in wanted_states)
            and (part is None or part in a.name.casefold())
        ]
        order = order_by or OrderBy.ASCENDING
        # Ties (and those without the value) by ID in the same direction, as Determined's master.
        kept.sort(key=lambda a: a.id, reverse=order.value == "desc")
        return [
            Experiment._from_wire(a, self._session)
            for a in nulls_last(kept, experiment_key(sort_by or ExperimentSortBy.ID), order)
        ]

    def get_trial(self, trial_id: int) -> Trial:
        """The trial with this ID.

        Raises:
            APIError: None has it (``status_code`` 404), or the user may not read it.
        """
        return Trial._from_wire(self._session.get_trial(trial_id), self._session)

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        """Checkpoint ``uuid`` of this master (its files are read on ``download()``, off-cluster as
        ``det checkpoint download`` reads them)."""
        return Checkpoint(uuid, self._use)

    def iter_trials_metrics(self, trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
        """Every report of ``group`` (``"training"``, ``"validation"`` or any other) the trials
        made so far, trial by trial in ID order, each in step order.

        Raises:
            ValueError: ``trial_ids`` is empty.
        """
        return trials_metrics(self._session, trial_ids, group, TrialMetrics)

    def stream_trials_metrics(self, trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
        """Deprecated: ``iter_trials_metrics``."""
        _warn_deprecated("Determined.stream_trials_metrics", "Determined.iter_trials_metrics")
        return self.iter_trials_metrics(trial_ids, group)

    def stream_trials_training_metrics(self, trial_ids: list[int]) -> Iterator[TrainingMetrics]:
        """Deprecated: ``iter_trials_metrics(trial_ids, "training")``."""
        _warn_deprecated(
            "Determined.stream_trials_training_metrics",
            "Determined.iter_trials_metrics with `group` set to 'training'",
        )
        return trials_metrics(self._session, trial_ids, TRAINING, TrainingMetrics)

    def stream_trials_validation_metrics(self, trial_ids: list[int]) -> Iterator[ValidationMetrics]:
        """Deprecated: ``iter_trials_metrics(trial_ids, "validation")``."""
        _warn_deprecated(
            "Determined.stream_trials_validation_metrics",
            "Determined.iter_trials_metrics with `group` set to 'validation'",
        )
        return trials_metrics(self._session, trial_ids, VALIDATION, ValidationMetrics)

    def create_model(
        self,
        name: str,
        description: str | None = "",
        metadata: dict[str, Any] | None = None,
        labels: list[str] | None = None,
    ) -> Model:
        return _create_model(self._use, name, description, metadata, labels)

    def get_model(self, identifier: str | int) -> Model:
        """The model with this name, or with this ID."""
        return _get_model(self._use, identifier)

    def get_model_by_id(self, model_id: int) -> Model:
        return self.get_model(model_id)

    def get_models(
        self,
        sort_by: ModelSortBy = ModelSortBy.NAME,
        order_by: ModelOrderBy | OrderBy = ModelOrderBy.ASCENDING,
        name: str = "",
        labels: list[str] | None = None,
    ) -> list[Model]:
        """The models whose name contains ``name`` and that carry every one of ``labels``."""
        return _get_models(self._use, sort_by, order_by, name, labels)


def _warn_deprecated(name: str, instead: str) -> None:
    warnings.warn(f"{name} is deprecated. Use {instead} instead", FutureWarning, stacklevel=3)


def _config_text(config: str | os.PathLike[str] | dict[str, Any], *, check: bool) -> str:
    """The YAML text of ``config`` (a file's path, or a dict); with ``check``, validated here first
    (as ``det experiment create`` does: every problem named with its field; the fields accepted but
    not acted on are logged). A config laid over a template is the master's to check."""
    import yaml

    from det_airflow.config import parse_config, read_yaml
    from det_airflow.errors import ConfigError

    source: str | None = None
    if isinstance(config, dict):
        text = yaml.safe_dump(config, sort_keys=False)
    elif isinstance(config, str | os.PathLike):
        source = os.fspath(config)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([("", f"cannot read the file: {exc.strerror}")], source=source) from None
        except UnicodeDecodeError:
            raise ConfigError([("", "cannot read the file: it is not UTF-8 text")], source=source) from None
    else:
        raise ValueError("config parameter must be dictionary or path")
    if check:
        for warning in parse_config(text, source_name=source).warnings:
            logger.warning(warning)
    else:
        read_yaml(text, source)
    return text


def create_experiment(
    config: str | os.PathLike[str] | dict[str, Any],
    model_dir: str | os.PathLike[str] | None = None,
    includes: Iterable[str | os.PathLike[str]] | None = None,
    project_id: int | None = None,
    template: str | None = None,
) -> Experiment:
    """Creates an experiment from ``config`` (a YAML file's path or a dict) and the training code
    in ``model_dir``, as ``det experiment create`` does; see ``Determined.create_experiment``."""
    return _default().create_experiment(config, model_dir, includes, project_id, template)


def get_experiment(experiment_id: int) -> Experiment:
    """The experiment with this ID (``APIError`` with ``status_code`` 404 when there is none)."""
    return _default().get_experiment(experiment_id)


def list_experiments(
    sort_by: ExperimentSortBy | None = None,
    order_by: OrderBy | None = None,
    experiment_ids: list[int] | None = None,
    labels: list[str] | None = None,
    users: list[str] | None = None,
    states: list[ExperimentState] | None = None,
    name: str | None = None,
    project_id: int | None = None,
) -> list[Experiment]:
    """The experiments that pass every filter given; see ``Determined.list_experiments``."""
    return _default().list_experiments(
        sort_by=sort_by,
        order_by=order_by,
        experiment_ids=experiment_ids,
        labels=labels,
        users=users,
        states=states,
        name=name,
        project_id=project_id,
    )


def get_trial(trial_id: int) -> Trial:
    """The trial with this ID (``APIError`` with ``status_code`` 404 when there is none)."""
    return _default().get_trial(trial_id)


def iter_trials_metrics(trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
    """Every report of ``group`` the trials made so far, trial by trial, each in step order."""
    return _default().iter_trials_metrics(trial_ids, group)


def stream_trials_metrics(trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
    """Deprecated: ``iter_trials_metrics``."""
    _warn_deprecated("client.stream_trials_metrics", "client.iter_trials_metrics")
    return _default().iter_trials_metrics(trial_ids, group)


def stream_trials_training_metrics(trial_ids: list[int]) -> Iterator[TrainingMetrics]:
    """Deprecated: ``iter_trials_metrics(trial_ids, "training")``."""
    _warn_deprecated(
        "client.stream_trials_training_metrics", "client.iter_trials_metrics with `group` set to 'training'"
    )
    return trials_metrics(_default()._session, trial_ids, TRAINING, TrainingMetrics)


def stream_trials_validation_metrics(trial_ids: list[int]) -> Iterator[ValidationMetrics]:
    """Deprecated: ``iter_trials_metrics(trial_ids, "validation")``."""
    _warn_deprecated(
        "client.stream_trials_validation_metrics",
        "client.iter_trials_metrics with `group` set to 'validation'",
    )
    return trials_metrics(_default()._session, trial_ids, VALIDATION, ValidationMetrics)


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"determined.experimental.client.{name}: det-airflow's client offers login(), Determined, "
        "create_experiment, get_experiment, list_experiments, get_trial, iter_trials_metrics "
        "(and the deprecated stream_trials_*), get_checkpoint and the model registry "
        "(create_model, get_model, get_models); users, workspaces and projects are managed with "
        "the det CLI (det user, det workspace, det project)"
    )
