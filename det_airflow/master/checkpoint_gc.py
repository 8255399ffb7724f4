"""Checkpoint garbage collection: which of an experiment's checkpoints its storage policy keeps.

As in Determined, when a trial ends the experiment keeps, among its COMPLETED checkpoints, the
``save_experiment_best`` best of the whole experiment, the ``save_trial_best`` best of each trial,
the ``save_trial_latest`` latest of each trial, and every trial's ``latest_checkpoint`` (a paused
or queued trial resumes from it),
and every checkpoint registered as a model version. The rest is garbage. Selecting it reads only; marking the rows
DELETED is the caller's, through ``lifecycle.delete_checkpoint``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Row, select

from det_airflow.config import CheckpointStorageConfig
from det_airflow.master import experiments, file_cleanup, lifecycle, models_registry, removals, schema
from det_airflow.master.db import Database

if TYPE_CHECKING:
    from det_airflow.config import ExperimentConfig


def checkpoints_to_delete(conn: Connection, experiment_id: int, cfg: ExperimentConfig) -> list[Row]:
    """The COMPLETED checkpoints of the experiment that its policy does not keep.

    The rows have ``uuid``, ``trial_id`` and ``storage`` (for ``file_cleanup.refused_checkpoints``) and
    ``state`` (for ``lifecycle.delete_checkpoint``), among others.
    """
    # No storage section of its own: the policy defaults of the storage config apply.
    policy = cfg.checkpoint_storage or CheckpointStorageConfig
    c = schema.checkpoints.c
    rows = conn.execute(
        select(c.uuid, c.trial_id, c.state, c.storage, c.steps_completed, c.validation_metric).where(
            c.experiment_id == experiment_id, c.state == "COMPLETED"
        )
    ).all()
    smaller_is_better = cfg.searcher.smaller_is_better
    keep = _trials_latest_checkpoint(conn, experiment_id)
    keep |= set(models_registry.registered(conn, [row.uuid for row in rows]))
    keep |= _uuids(_best_first(rows, smaller_is_better)[: policy.save_experiment_best])
    for trial_rows in _by_trial(rows):
        keep |= _uuids(_best_first(trial_rows, smaller_is_better)[: policy.save_trial_best])
        keep |= _uuids(_latest_first(trial_rows)[: policy.save_trial_latest])
    return [row for row in rows if row.uuid not in keep]


def collect(db: Database, experiment_id: int) -> list[str]:
    """Delete what the experiment's policy does not keep: in one transaction, the rows become
    DELETED and the removal of their files (``shared_fs`` folders, ``s3`` objects; a ``directory``
    storage is a container's own) is queued for a host (master/removals.py). Returns what will not
    be removed."""
    with db.begin() as conn:
        exp = experiments.get_experiment(conn, experiment_id)
        cfg = experiments.experiment_config(exp)
        garbage = checkpoints_to_delete(conn, experiment_id, cfg)
        for row in garbage:
            lifecycle.delete_checkpoint(conn, row, _REASON)
        uuids, refused = file_cleanup.refused_checkpoints(exp, [(row.uuid, row.storage) for row in garbage])
        removals.queue_checkpoints(conn, exp, uuids)
    return refused


_REASON = "checkpoint_storage keeps neither it as one of the experiment's save_experiment_best, nor "
_REASON += "as one of its trial's save_trial_best or save_trial_latest"


def _best_first(rows: Sequence[Row], smaller_is_better: bool) -> list[Row]:
    """By the searcher metric, best first; a checkpoint without one ranks after all that have one.

    Equal metrics go to the later checkpoint, the one a resumed trial would rather have.
    """

    def key(row: Row) -> tuple[bool, float, int]:
        metric = row.validation_metric
        if metric is None:
            return True, 0.0, -row.steps_completed
        return False, metric if smaller_is_better else -metric, -row.steps_completed

    return sorted(rows, key=key)


def _latest_first(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: row.steps_completed, reverse=True)


def _by_trial(rows: Iterable[Row]) -> list[list[Row]]:
    trials: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        trials[row.trial_id].append(row)
    return list(trials.values())


def _trials_latest_checkpoint(conn: Connection, experiment_id: int) -> set[str]:
    t = schema.trials.c
    uuids = conn.execute(
        select(t.latest_checkpoint).where(t.experiment_id == experiment_id, t.latest_checkpoint.is_not(None))
    ).scalars()
    return set(uuids)


def _uuids(rows: Iterable[Row]) -> set[str]:
    return {row.uuid for row in rows}
