"""Determined's ``Trial`` of ``experimental.client``: a trial of the master, read and stopped through
its People routes."""

from __future__ import annotations

import datetime
import enum
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from det_airflow.core._train import TRAINING, VALIDATION
from det_airflow.experimental._client_checkpoints import (
    Checkpoint,
    CheckpointSortBy,
    OrderBy,
    deprecated_top,
    of_master,
    sorted_checkpoints,
)
from det_airflow.experimental._client_metrics import (
    TrainingMetrics,
    TrialMetrics,
    ValidationMetrics,
    summarize,
    trials_metrics,
)
from det_airflow.states import LOG_LEVELS, TrialState

if TYPE_CHECKING:
    from det_airflow.api import models as wire
    from det_airflow.api.user import UserClient
    from det_airflow.experimental._client_experiment import Experiment

# Lines asked for at once, and seconds between two looks at a followed trial's logs.
_LOG_PAGE = 1000
_FOLLOW_INTERVAL = 1.0


class LogLevel(enum.Enum):
    """The least severity of the log lines ``Trial.iter_logs`` returns (the names of ``LOG_LEVELS``)."""

    TRACE = "TRACE"
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


class TrialSortBy(enum.Enum):
    """What ``Experiment.list_trials`` sorts by (the fields the master reports)."""

    ID = "id"
    START_TIME = "start_time"
    END_TIME = "end_time"
    STATE = "state"
    BEST_VALIDATION_METRIC = "best_validation_metric"
    LATEST_VALIDATION_METRIC = "latest_validation_metric"
    BATCHES_PROCESSED = "total_batches"
    DURATION = "duration"
    RESTARTS = "restarts"


class Trial:
    """A trial, usually from ``client.get_trial(id)`` or ``Experiment.list_trials()``.

    Attributes:
        id: The trial's ID.
        experiment_id: Its experiment's ID.
        hparams: Its hyperparameters.
        state: Its ``TrialState`` when last loaded: call ``reload()`` for the current one.
        summary_metrics: Per metric group (``avg_metrics`` for training, ``validation_metrics``
            for validation, else the group's name), per metric: ``type``, ``count``, ``min``,
            ``max``, ``sum``, ``mean`` and ``last``. Computed from the reports on first use.
    """

    def __init__(self, trial_id: int, session: UserClient) -> None:
        self.id = trial_id
        self._session = session
        self.experiment_id: int | None = None
        self.hparams: dict[str, Any] | None = None
        self.state: TrialState | None = None
        self._summary_metrics: dict[str, Any] | None = None

    @classmethod
    def _from_wire(cls, answer: wire.Trial, session: UserClient) -> Trial:
        trial = cls(answer.id, session)
        trial._hydrate(answer)
        return trial

    def _hydrate(self, answer: wire.Trial) -> None:
        self.experiment_id = answer.experiment_id
        self.hparams = dict(answer.hparams)
        self.state = TrialState(answer.state)
        self._summary_metrics = None

    @property
    def summary_metrics(self) -> dict[str, Any]:
        if self._summary_metrics is None:
            self._summary_metrics = summarize(self._session.trial_metrics(self.id))
        return self._summary_metrics

    @summary_metrics.setter
    def summary_metrics(self, value: dict[str, Any]) -> None:
        self._summary_metrics = value

    def reload(self) -> None:
        """Reads the trial's state, hyperparameters and metrics again."""
        self._hydrate(self._session.get_trial(self.id))

    def kill(self) -> None:
        """Stops the trial; the rest of its experiment carries on."""
        self._hydrate(self._session.kill_trial(self.id))

    def get_experiment(self) -> Experiment:
        """The trial's experiment."""
        from det_airflow.experimental._client_experiment import Experiment

        if self.experiment_id is None:
            self.reload()
        assert self.experiment_id is not None
        return Experiment._from_detail(self._session.get_experiment(self.experiment_id), self._session)

    # --- logs ---

    def iter_logs(
        self,
        follow: bool = False,
        *,
        head: int | None = None,
        tail: int | None = None,
        container_ids: list[str] | None = None,
        rank_ids: list[int] | None = None,
        stdtypes: list[str] | None = None,
        min_level: Any = None,
        timestamp_before: str | int | None = None,
        timestamp_after: str | int | None = None,
        sources: list[str] | None = None,
        search_text: str | None = None,
    ) -> Iterator[str]:
        """The messages of the trial's log lines that match every filter given.

        Args:
            follow: Keep waiting for new lines until the trial has ended.
            head: Only the first ``head`` matching lines.
            tail: Only the last ``tail`` matching lines (and, following, those that come).
            container_ids, rank_ids, stdtypes, sources: Only lines of these.
            min_level: A ``LogLevel`` (or its name): only lines at least this severe.
            timestamp_before, timestamp_after: An RFC 3339 time or seconds since the epoch.
            search_text: Only lines whose message contains it.
        """
        if head is not None and head < 0:
            raise ValueError(f"head must be non-negative, got {head}")
        if tail is not None and tail < 0:
            raise ValueError(f"tail must be non-negative, got {tail}")
        level = min_level.value if isinstance(min_level, LogLevel) else min_level
        if level is not None and level not in LOG_LEVELS:
            raise ValueError(f"min_level must be one of {', '.join(LOG_LEVELS)}, got {min_level!r}")
        query = {
            "rank": rank_ids,
            "level": level,
            "timestamp_before": _log_time(timestamp_before, "timestamp_before"),
            "timestamp_after": _log_time(timestamp_after, "timestamp_after"),
            "container_id": container_ids,
            "source": sources,
            "stdtype": stdtypes,
            "search": search_text,
        }
        return _log_messages(self._session, self.id, follow=follow, head=head, tail=tail, query=query)

    def logs(self, *args: Any, **kwargs: Any) -> Iterable[str]:
        """Deprecated: ``iter_logs``."""
        warnings.warn(
            "Trial.logs() has been deprecated and will be removed in a future version. "
            "Please call Trial.iter_logs() instead.",
            FutureWarning,
            stacklevel=2,
        )
        return self.iter_logs(*args, **kwargs)

    # --- checkpoints ---

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | None = None,
        max_results: int | None = None,
    ) -> list[Checkpoint]:
        """The trial's completed checkpoints; by default by the searcher's metric, best first.

        ``sort_by`` and ``order_by`` go together: a ``CheckpointSortBy``, or the name of a
        validation metric (its value at each checkpoint's step). Their files are read off-cluster
        as ``det checkpoint download`` reads them.
        """
        if self.experiment_id is None:
            self.reload()
        assert self.experiment_id is not None
        found = sorted_checkpoints(
            self._session,
            self.experiment_id,
            trial_id=self.id,
            sort_by=sort_by,
            order_by=order_by,
            max_results=max_results,
        )
        return [of_master(c.uuid, self._session) for c in found]

    def top_checkpoint(self, sort_by: str | None = None, smaller_is_better: bool | None = None) -> Checkpoint:
        """Deprecated: ``list_checkpoints(..., max_results=1)[0]``."""
        return deprecated_top(
            "Trial",
            self.list_checkpoints,
            sort_by,
            smaller_is_better,
            ValueError("No checkpoints found for criteria."),
        )

    # --- metrics ---

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """The trial's reports of ``group`` (``"training"``, ``"validation"`` or another), in step order."""
        return trials_metrics(self._session, [self.id], group, TrialMetrics)

    def stream_metrics(self, group: str) -> Iterable[TrialMetrics]:
        """Deprecated: ``iter_metrics``."""
        _deprecated("Trial.stream_metrics", "Trial.iter_metrics")
        return self.iter_metrics(group)

    def stream_training_metrics(self) -> Iterable[TrainingMetrics]:
        """Deprecated: ``iter_metrics("training")``."""
        _deprecated("Trial.stream_training_metrics", "Trial.iter_metrics with `group` set to 'training'")
        return trials_metrics(self._session, [self.id], TRAINING, TrainingMetrics)

    def stream_validation_metrics(self) -> Iterable[ValidationMetrics]:
        """Deprecated: ``iter_metrics("validation")``."""
        _deprecated("Trial.stream_validation_metrics", "Trial.iter_metrics with `group` set to 'validation'")
        return trials_metrics(self._session, [self.id], VALIDATION, ValidationMetrics)

    def __repr__(self) -> str:
        return f"Trial(id={self.id})"


def _deprecated(name: str, instead: str) -> None:
    warnings.warn(f"{name} is deprecated. Use {instead} instead", FutureWarning, stacklevel=3)


def _log_time(value: str | int | None, name: str) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("timestamp_before and timestamp_after must be either str or int types.")
    if isinstance(value, int):
        return datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"Timestamp {value} has an invalid format.") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def _log_messages(
    client: UserClient,
    trial_id: int,
    *,
    follow: bool,
    head: int | None,
    tail: int | None,
    query: dict[str, Any],
) -> Iterator[str]:
    query = {k: v for k, v in query.items() if v is not None}
    after: int | None = None
    if tail is not None:
        lines = client.trial_logs(trial_id, tail=tail, **query).logs if tail else []
        yield from (line.message for line in lines)
        if not follow:
            return
        last = lines or client.trial_logs(trial_id, tail=1).logs  # follow from the current end
        after = last[-1].id if last else None
    remaining = head
    ended_and_quiet = False
    while remaining != 0:
        page = client.trial_logs(trial_id, after=after, limit=_LOG_PAGE, **query)
        lines = page.logs if remaining is None else page.logs[:remaining]
        yield from (line.message for line in lines)
        if remaining is not None:
            remaining -= len(lines)
        if page.logs:
            after = page.logs[-1].id
            ended_and_quiet = False
            if len(page.logs) >= _LOG_PAGE or not follow:
                continue
        elif not follow:
            return
        elif page.trial_state.is_terminal:
            # One more look once the trial has ended: lines written just before its state changed.
            if ended_and_quiet:
                return
            ended_and_quiet = True
        time.sleep(_FOLLOW_INTERVAL)
