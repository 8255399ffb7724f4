"""Metrics trials reported, as Determined's client hands them out: one ``TrialMetrics`` per report,
and a trial's ``summary_metrics`` (per group, each metric's type, count, min, max, sum, mean and
latest value), computed from the reports the master keeps."""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from det_airflow.core._train import TRAINING, VALIDATION

if TYPE_CHECKING:
    from det_airflow.api import models as wire
    from det_airflow.api.user import UserClient

# Determined keeps the two built-in groups under their pre-0.23 names in ``summary_metrics``.
_SUMMARY_KEYS = {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}
# A string metric in Python's ``isoformat()`` shape counts as a date, as Determined's master has it.
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclasses.dataclass
class TrialMetrics:
    """One metrics report of a trial.

    Attributes:
        trial_id: The trial that reported it.
        trial_run_id: The run of the trial that reported it (a trial's run ID grows each time it
            starts again); None from a master that does not say.
        steps_completed: The ``steps_completed`` the report was made at.
        end_time: When the master received it (None when it does not know).
        metrics: The metrics reported.
        group: The group reported to: ``"training"``, ``"validation"`` or any other name.
        batch_metrics: Not kept by det-airflow: always None.
    """

    trial_id: int
    trial_run_id: int | None
    steps_completed: int
    end_time: datetime.datetime | None
    metrics: dict[str, Any]
    group: str
    batch_metrics: list[dict[str, Any]] | None = None

    @property
    def total_batches(self) -> int:
        """Deprecated name of ``steps_completed``."""
        return self.steps_completed

    @total_batches.setter
    def total_batches(self, value: int) -> None:
        self.steps_completed = value

    @classmethod
    def _from_wire(cls, report: wire.Metrics) -> Self:
        when = datetime.datetime.fromisoformat(report.report_time) if report.report_time else None
        fields: dict[str, Any] = {
            "trial_id": report.trial_id,
            "trial_run_id": report.trial_run_id,
            "steps_completed": report.steps_completed,
            "end_time": when,
            "metrics": dict(report.metrics),
        }
        if cls is TrialMetrics:  # the deprecated subclasses set their own group
            fields["group"] = report.group
        return cls(**fields)


class TrainingMetrics(TrialMetrics):
    """Deprecated: a ``TrialMetrics`` of group ``"training"``."""

    def __init__(self, total_batches: int | None = None, **kwargs: Any) -> None:
        if total_batches is not None:
            kwargs["steps_completed"] = total_batches
        kwargs["group"] = TRAINING
        super().__init__(**kwargs)


class ValidationMetrics(TrialMetrics):
    """Deprecated: a ``TrialMetrics`` of group ``"validation"``."""

    def __init__(self, total_batches: int | None = None, **kwargs: Any) -> None:
        if total_batches is not None:
            kwargs["steps_completed"] = total_batches
        kwargs["group"] = VALIDATION
        super().__init__(**kwargs)


MetricsT = TypeVar("MetricsT", bound=TrialMetrics)


def trials_metrics(
    client: UserClient, trial_ids: Sequence[int], group: str, kind: type[MetricsT]
) -> Iterator[MetricsT]:
    """Every report of ``group`` the trials made so far: trial by trial in ID order, each trial's in
    step order. Each trial's reports are fetched when the iteration reaches it."""
    if not trial_ids:
        raise ValueError("trial_ids: give at least one trial ID")
    return _reports(client, sorted(set(trial_ids)), group, kind)


def _reports(
    client: UserClient, trial_ids: list[int], group: str, kind: type[MetricsT]
) -> Iterator[MetricsT]:
    for trial_id in trial_ids:
        for report in client.trial_metrics(trial_id, group=group):
            yield kind._from_wire(report)


def summarize(reports: Iterable[wire.Metrics]) -> dict[str, Any]:
    """Determined's ``summary_metrics`` of a trial from its reports (in step order): per group
    (``avg_metrics`` for training, ``validation_metrics`` for validation, else the group's name),
    per metric its ``type``; numbers also ``count``, ``min``, ``max``, ``sum`` and ``mean``; and
    ``last``, its value in the group's latest report."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    latest: dict[str, dict[str, Any]] = {}
    for report in reports:
        group = summary.setdefault(_SUMMARY_KEYS.get(report.group, report.group), {})
        latest[report.group] = report.metrics
        for name, value in report.metrics.items():
            _add(group, name, value)
    for group_name, metrics in latest.items():
        for name, entry in summary[_SUMMARY_KEYS.get(group_name, group_name)].items():
            entry["last"] = metrics.get(name)
    return summary


def _add(group: dict[str, dict[str, Any]], name: str, value: Any) -> None:
    kind, number = _kind(value)
    entry = group.get(name)
    if entry is None:
        entry = group[name] = {"type": kind}
    elif entry["type"] != kind:
        # A metric reported with two types is summarized as a string from then on.
        kind = "string"
        entry = group[name] = {"type": kind}
    if kind != "number" or number is None:
        return
    if "count" not in entry:
        entry.update(count=1, min=number, max=number, sum=number, mean=number)
        return
    entry["count"] += 1
    entry["min"] = min(entry["min"], number)
    entry["max"] = max(entry["max"], number)
    entry["sum"] += number
    entry["mean"] = entry["sum"] / entry["count"]


def _kind(value: Any) -> tuple[str, float | None]:
    """The summary type of a metric's value, and the value as a number when it is one."""
    if isinstance(value, bool):
        return "boolean", None
    if isinstance(value, int | float):
        return "number", float(value)
    if isinstance(value, str):
        if value in _SPECIAL_FLOATS:
            return "number", _SPECIAL_FLOATS[value]
        return ("date" if _ISO_DATE.match(value) else "string"), None
    if isinstance(value, dict):
        return "object", None
    if isinstance(value, list):
        return "array", None
    if value is None:
        return "null", None
    return "string", None
