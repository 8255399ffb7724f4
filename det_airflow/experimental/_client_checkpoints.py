"""Checkpoints of ``experimental.client``: a ``Checkpoint`` and where its files are read from, and
the checkpoints of an experiment or a trial in the order Determined's ``list_checkpoints`` gives:
only completed ones, by an attribute (``CheckpointSortBy``) or by a validation metric's value at
each checkpoint's step, missing values last either way."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from det_airflow import core
from det_airflow.cluster_info import get_cluster_info
from det_airflow.core._train import VALIDATION

if TYPE_CHECKING:
    from det_airflow.api import models as wire
    from det_airflow.api.user import UserClient

# Opens the client of the master a checkpoint came from: the session of the ``Determined``,
# ``Experiment`` or ``Trial`` that listed it, or a new client per call for the module's functions.
Connector = Callable[[], AbstractContextManager["UserClient"]]

COMPLETED = "COMPLETED"
T = TypeVar("T")
C = TypeVar("C")


class OrderBy(enum.Enum):
    """Whether a sorted list is in ascending or descending order."""

    ASCENDING = "asc"
    ASC = "asc"
    DESCENDING = "desc"
    DESC = "desc"


class CheckpointSortBy(enum.Enum):
    """The attributes checkpoints can be sorted by."""

    UUID = "uuid"
    TRIAL_ID = "trial_id"
    BATCH_NUMBER = "steps_completed"
    END_TIME = "report_time"
    STATE = "state"
    SEARCHER_METRIC = "validation_metric"


class DownloadMode(enum.Enum):
    """How ``Checkpoint.download`` reads a checkpoint of the master off-cluster, as the ``--mode`` of
    ``det checkpoint download``: ``DIRECT`` from its storage with this machine's access (a mounted
    folder, or a bucket with your own credentials), ``MASTER`` streamed by the master (object
    storage), ``AUTO`` a folder directly and object storage through the master."""

    DIRECT = "direct"
    MASTER = "master"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint, by its UUID.

    In a trial its files are read through the trial's master. Off-cluster, one that came from the
    master (``Experiment.list_checkpoints``, ``Trial.list_checkpoints``, ``Determined.get_checkpoint``,
    a model version) is read as ``det checkpoint download`` reads it, with the same user; one from
    the module's ``get_checkpoint(uuid)`` is read from the local store (where ``core.init()`` writes
    off-cluster), which needs no login.
    """

    uuid: str
    _master: Connector | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def metadata(self) -> dict[str, Any]:
        if self._master is not None and not _in_a_trial():
            with self._master() as client:
                return dict(client.get_checkpoint(self.uuid).metadata)
        with core.init() as context:
            metadata = context.checkpoint.get_metadata(self.uuid)
        return metadata

    def download(self, path: str | None = None, mode: DownloadMode | str | None = None) -> str:
        """Copies the checkpoint's files into ``path`` (default: ``checkpoints/<uuid>`` under the
        current folder, as in Determined); answers it.

        Args:
            path: The folder to put them in (created when missing).
            mode: A ``DownloadMode`` (or its value), for a checkpoint of the master off-cluster;
                default ``AUTO``.

        Raises:
            DetError: The checkpoint was deleted, its storage cannot be read this way from here,
                or a file is missing.
            APIError: The master has no such checkpoint, or the user may not read it.
        """
        how = DownloadMode(mode) if mode is not None else DownloadMode.AUTO
        target = Path(path) if path is not None else Path("checkpoints", self.uuid)
        if self._master is not None and not _in_a_trial():
            from det_airflow.cli.checkpoint import download

            with self._master() as client:
                download(client, client.get_checkpoint(self.uuid), target, how.value)
            return str(target)
        with core.init() as context:
            context.checkpoint.download(self.uuid, target)
        return str(target)


def of_master(uuid: str, session: UserClient) -> Checkpoint:
    """Checkpoint ``uuid`` of the master ``session`` talks to, read through that session."""

    def held() -> AbstractContextManager[UserClient]:
        return contextlib.nullcontext(session)

    return Checkpoint(uuid, held)


def _in_a_trial() -> bool:
    """Whether this process is a trial of a master (its checkpoints are read through that master)."""
    info = get_cluster_info()
    return info is not None and bool(info.master_url)


def sorted_checkpoints(
    client: UserClient,
    experiment_id: int,
    *,
    trial_id: int | None = None,
    sort_by: str | CheckpointSortBy | None = None,
    order_by: OrderBy | None = None,
    max_results: int | None = None,
) -> list[wire.Checkpoint]:
    """The completed checkpoints of the experiment (of one of its trials, with ``trial_id``).

    Without ``sort_by`` and ``order_by``: by the searcher's metric, best first. ``sort_by`` a
    string: by that validation metric as reported at each checkpoint's step.
    """
    if (sort_by is None) != (order_by is None):
        raise AssertionError("sort_by and order_by must be either both set, or neither.")
    if sort_by is not None and not isinstance(sort_by, CheckpointSortBy | str):
        raise ValueError("sort_by must be of type CheckpointSortBy or str")
    found = [
        c
        for c in client.list_checkpoints(experiment_id)
        if c.state == COMPLETED and (trial_id is None or c.trial_id == trial_id)
    ]
    if sort_by is None or order_by is None:
        sort_by = CheckpointSortBy.SEARCHER_METRIC
        searcher = client.get_experiment_config(experiment_id).get("searcher") or {}
        order_by = OrderBy.ASC if searcher.get("smaller_is_better", True) else OrderBy.DESC
    if isinstance(sort_by, CheckpointSortBy):
        attribute = sort_by.value

        def key(c: wire.Checkpoint) -> Any:
            return getattr(c, attribute)

    else:
        values = _metric_at_checkpoints(client, found, sort_by)

        def key(c: wire.Checkpoint) -> Any:
            return values.get((c.trial_id, c.steps_completed))

    ordered = nulls_last(found, key, order_by)
    return ordered if max_results is None else ordered[:max_results]


def nulls_last(items: Iterable[T], key: Callable[[T], Any], order_by: OrderBy) -> list[T]:
    """``items`` by ``key`` in ``order_by``'s order, those whose key is None last either way (as
    Determined's master sorts); ties keep their order."""
    items = list(items)
    present = sorted((i for i in items if key(i) is not None), key=key, reverse=order_by.value == "desc")
    return present + [i for i in items if key(i) is None]


def _metric_at_checkpoints(
    client: UserClient, checkpoints: list[wire.Checkpoint], metric: str
) -> dict[tuple[int, int], Any]:
    """(trial ID, steps) → the metric's value in that trial's validation at those steps."""
    values: dict[tuple[int, int], Any] = {}
    for trial_id in sorted({c.trial_id for c in checkpoints}):
        for report in client.trial_metrics(trial_id, group=VALIDATION):
            if report.metrics.get(metric) is not None:
                values[(trial_id, report.steps_completed)] = report.metrics[metric]
    return values


def deprecated_top(
    owner: str,
    list_checkpoints: Callable[..., list[C]],
    sort_by: str | None,
    smaller_is_better: bool | None,
    none_found: Exception,
) -> C:
    """Determined's deprecated ``top_checkpoint()`` of an experiment or a trial (``owner`` names the
    class in the warning): the first of ``list_checkpoints``; ``none_found`` raised when there is
    none (Determined raises a different error for each)."""
    warnings.warn(
        f"{owner}.top_checkpoint() has been deprecated and will be removed in a future version. "
        f"Please call {owner}.list_checkpoints(...,max_results=1) instead.",
        FutureWarning,
        stacklevel=3,
    )
    order_by = (OrderBy.ASC if smaller_is_better else OrderBy.DESC) if sort_by else None
    found = list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
    if not found:
        raise none_found
    return found[0]
