"""Determined's ``Experiment`` of ``experimental.client``: an experiment of the master, read and
driven through its People routes (the ones ``det experiment`` uses)."""

from __future__ import annotations

import datetime
import enum
import logging
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_airflow.core._train import VALIDATION
from det_airflow.experimental._client_checkpoints import (
    Checkpoint,
    CheckpointSortBy,
    OrderBy,
    deprecated_top,
    nulls_last,
    of_master,
    sorted_checkpoints,
)
from det_airflow.experimental._client_trial import Trial, TrialSortBy
from det_airflow.states import ExperimentState

if TYPE_CHECKING:
    from det_airflow.api import models as wire
    from det_airflow.api.user import UserClient

logger = logging.getLogger("determined.client")


class ExperimentSortBy(enum.Enum):
    """What ``list_experiments`` sorts by (the fields the master reports)."""

    ID = "id"
    DESCRIPTION = "description"
    START_TIME = "start_time"
    END_TIME = "end_time"
    STATE = "state"
    NUM_TRIALS = "num_trials"
    PROGRESS = "progress"
    USER = "owner"
    NAME = "name"
    FORKED_FROM = "parent_id"
    RESOURCE_POOL = "resource_pool"
    PROJECT_ID = "project_id"
    SEARCHER_METRIC_VAL = "best_validation"


class Experiment:
    """An experiment, usually from ``client.create_experiment`` or ``client.get_experiment``.

    Attributes:
        id: The experiment's ID.
        config: Its experiment config, as the master normalized it (read on first use when the
            experiment came from a list).
        state: Its ``ExperimentState`` when last loaded: call ``reload()`` for the current one.
        archived, name, progress, description: As last loaded.
        labels: Its labels (a set), or None when it has none.
        notes: Its Markdown notes ("" when none were written), as last loaded.
        project_id, workspace_id: The project it lives in and that project's workspace (the
            Uncategorized ones when its config names none), as last loaded.
    """

    def __init__(self, experiment_id: int, session: UserClient) -> None:
        self._id = experiment_id
        self._session = session
        self._config: dict[str, Any] | None = None
        self.state: ExperimentState | None = None
        self.labels: set[str] | None = None
        self.archived: bool | None = None
        self.name: str | None = None
        self.progress: float | None = None
        self.description: str | None = None
        self.notes: str | None = None
        self.project_id: int | None = None
        self.workspace_id: int | None = None

    @property
    def id(self) -> int:
        return self._id

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            self._config = self._session.get_experiment_config(self._id)
        return self._config

    @config.setter
    def config(self, value: dict[str, Any] | None) -> None:
        self._config = value

    @classmethod
    def _from_wire(cls, answer: wire.Experiment, session: UserClient) -> Experiment:
        experiment = cls(answer.id, session)
        experiment._hydrate(answer)
        return experiment

    @classmethod
    def _from_detail(cls, detail: wire.ExperimentDetail, session: UserClient) -> Experiment:
        experiment = cls._from_wire(detail.experiment, session)
        experiment._config = dict(detail.config)
        return experiment

    def _hydrate(self, answer: wire.Experiment) -> None:
        self.state = ExperimentState(answer.state)
        self.archived = answer.archived
        self.name = answer.name
        self.progress = answer.progress
        self.description = answer.description
        self.notes = answer.notes
        self.labels = set(answer.labels) if answer.labels else None
        self.project_id = answer.project_id
        self.workspace_id = answer.workspace_id

    def reload(self) -> None:
        """Reads the experiment's state and attributes again."""
        detail = self._session.get_experiment(self._id)
        self._hydrate(detail.experiment)
        self._config = dict(detail.config)

    # --- attributes ---

    def set_name(self, name: str) -> None:
        self._hydrate(self._session.update_experiment(self._id, name=name))

    def set_description(self, description: str) -> None:
        self._hydrate(self._session.update_experiment(self._id, description=description))

    def set_notes(self, notes: str) -> None:
        """Makes ``notes`` (Markdown) the experiment's notes, replacing those it had."""
        self._hydrate(self._session.update_experiment(self._id, notes=notes))

    def add_label(self, label: str) -> None:
        """Adds ``label`` (nothing happens when the experiment has it already)."""
        self._hydrate(self._session.add_label(self._id, label))

    def remove_label(self, label: str) -> None:
        """Removes ``label`` (nothing happens when the experiment does not have it)."""
        self._hydrate(self._session.remove_label(self._id, label))

    def set_labels(self, labels: Iterable[str]) -> None:
        """Makes ``labels`` the experiment's labels."""
        wanted = set(labels)
        current = set(self._session.get_experiment(self._id).experiment.labels)
        for label in sorted(current - wanted):
            self.remove_label(label)
        for label in sorted(wanted - current):
            self.add_label(label)
        self.labels = wanted or None

    def move_to_project(self, workspace_name: str, project_name: str) -> None:
        """Moves the experiment into project ``project_name`` of workspace ``workspace_name``."""
        project = self._session.move_experiment(self._id, workspace_name, project_name)
        self.project_id = project.id
        self.workspace_id = project.workspace_id

    # --- lifecycle ---

    def activate(self) -> None:
        self._hydrate(self._session.activate_experiment(self._id))

    def pause(self) -> None:
        self._hydrate(self._session.pause_experiment(self._id))

    def cancel(self) -> None:
        self._hydrate(self._session.cancel_experiment(self._id))

    def kill(self) -> None:
        self._hydrate(self._session.kill_experiment(self._id))

    def archive(self) -> None:
        self._hydrate(self._session.archive_experiment(self._id))

    def unarchive(self) -> None:
        self._hydrate(self._session.unarchive_experiment(self._id))

    def delete(self) -> None:
        """Deletes the ended experiment with its trials, logs and checkpoints."""
        deleted = self._session.delete_experiment(self._id)
        for what in deleted.not_removed:
            logger.warning("experiment %s: could not remove %s", self._id, what)

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Waits until the experiment has ended, looking every ``interval`` seconds; answers the
        state it ended in.

        Raises:
            ValueError: The experiment is paused (it would never end).
        """
        while True:
            self.reload()
            assert self.state is not None
            if self.state.is_terminal:
                return self.state
            if self.state == ExperimentState.PAUSED:
                raise ValueError(
                    f"Experiment {self.id} is in paused state. Make sure the experiment is active."
                )
            time.sleep(interval)

    def download_code(self, output_dir: str | None = None) -> str:
        """Saves the context the experiment was created with as ``exp-ID_model_def.tar.gz`` in
        ``output_dir`` (default: the current folder); answers its path."""
        data = self._session.get_experiment_context(self._id)
        folder = Path(output_dir).expanduser() if output_dir else Path()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"exp-{self._id}_model_def.tar.gz"
        path.write_bytes(data)
        return str(path)

    # --- trials ---

    def list_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[Trial]:
        """The experiment's trials, sorted (trials lacking the value sorted by come last)."""
        return list(self.iter_trials(sort_by, order_by))

    def iter_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy = OrderBy.ASCENDING,
        limit: int | None = None,
    ) -> Iterator[Trial]:
        """``list_trials``' trials one by one; ``limit`` (a page size in Determined) is accepted."""
        answers = self._session.list_trials(self._id)
        key = _trial_key(
            sort_by, self._searcher_metric if sort_by == TrialSortBy.LATEST_VALIDATION_METRIC else ""
        )
        return iter([Trial._from_wire(t, self._session) for t in nulls_last(answers, key, order_by)])

    def get_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[Trial]:
        """Deprecated: ``list_trials``."""
        warnings.warn(
            "Experiment.get_trials() has been deprecated and will be removed in a future version. "
            "Please call Experiment.list_trials() instead.",
            FutureWarning,
            stacklevel=2,
        )
        return self.list_trials(sort_by, order_by)

    def await_first_trial(self, interval: float = 0.1) -> Trial:
        """Waits until the experiment has a trial; answers the first one.

        Raises:
            RuntimeError: The experiment ended before it had a trial.
        """
        while True:
            detail = self._session.get_experiment(self._id)
            self._hydrate(detail.experiment)
            if detail.trials:
                return Trial._from_wire(min(detail.trials, key=lambda t: t.id), self._session)
            if self.state is not None and self.state.is_terminal:
                raise RuntimeError(
                    "This experiment has terminated before a trial was started."
                    f" Experiment is in state {self.state}."
                )
            time.sleep(interval)

    # --- checkpoints ---

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | None = None,
        max_results: int | None = None,
    ) -> list[Checkpoint]:
        """The experiment's completed checkpoints; by default by the searcher's metric, best first.

        ``sort_by`` and ``order_by`` go together: a ``CheckpointSortBy``, or the name of a
        validation metric (its value at each checkpoint's step). Their files are read off-cluster
        as ``det checkpoint download`` reads them.
        """
        found = sorted_checkpoints(
            self._session, self._id, sort_by=sort_by, order_by=order_by, max_results=max_results
        )
        return [of_master(c.uuid, self._session) for c in found]

    def top_checkpoint(self, sort_by: str | None = None, smaller_is_better: bool | None = None) -> Checkpoint:
        """Deprecated: ``list_checkpoints(..., max_results=1)[0]``."""
        return deprecated_top(
            "Experiment",
            self.list_checkpoints,
            sort_by,
            smaller_is_better,
            AssertionError(f"No checkpoints found for experiment {self.id}"),
        )

    def top_n_checkpoints(
        self, limit: int, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> list[Checkpoint]:
        """Deprecated: the best checkpoint of each of the ``limit`` best trials."""
        warnings.warn(
            "Experiment.top_n_checkpoints() has been deprecated and will be removed in a future "
            "version. Please call Experiment.list_checkpoints(...,max_results=n) instead.",
            FutureWarning,
            stacklevel=2,
        )
        order_by = (OrderBy.ASC if smaller_is_better else OrderBy.DESC) if sort_by else None
        found = sorted_checkpoints(self._session, self._id, sort_by=sort_by, order_by=order_by)
        if not found:
            raise AssertionError(f"No checkpoint found for experiment {self.id}")
        best_per_trial: dict[int, str] = {}
        for checkpoint in found:
            best_per_trial.setdefault(checkpoint.trial_id, checkpoint.uuid)
        return [of_master(uuid, self._session) for uuid in list(best_per_trial.values())[:limit]]

    @property
    def _searcher_metric(self) -> str:
        return str((self.config.get("searcher") or {}).get("metric") or "")

    def __repr__(self) -> str:
        return f"Experiment(id={self.id})"


def _trial_key(sort_by: TrialSortBy, searcher_metric: str) -> Any:
    """The value of a trial that ``sort_by`` orders by (None: the trial has none)."""
    if sort_by == TrialSortBy.BEST_VALIDATION_METRIC:
        return lambda t: t.best_validation.metric if t.best_validation else None
    if sort_by == TrialSortBy.LATEST_VALIDATION_METRIC:
        return lambda t: t.summary_metrics.get(VALIDATION, {}).get(searcher_metric)
    if sort_by == TrialSortBy.DURATION:
        return _duration
    attribute = sort_by.value
    return lambda t: getattr(t, attribute)


def _duration(trial: wire.Trial) -> float | None:
    if trial.start_time is None:
        return None
    start = datetime.datetime.fromisoformat(trial.start_time)
    end = (
        datetime.datetime.fromisoformat(trial.end_time)
        if trial.end_time
        else datetime.datetime.now(start.tzinfo)
    )
    return (end - start).total_seconds()


def experiment_key(sort_by: ExperimentSortBy) -> Any:
    """The value of an experiment that ``sort_by`` orders by (None: it has none)."""
    if sort_by == ExperimentSortBy.PROGRESS:
        return lambda e: e.progress or 0.0  # Determined sorts a missing progress as 0
    attribute = sort_by.value
    return lambda e: getattr(e, attribute)
