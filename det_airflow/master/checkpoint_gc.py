"""Checkpoint garbage collection: which of an experiment's checkpoints its storage policy keeps.

As in Determined, when a trial ends the experiment keeps, among its COMPLETED checkpoints, the
``save_experiment_best`` best of the whole experiment, the ``save_trial_best`` best of each trial,
the ``save_trial_latest`` latest of each trial, and every trial's ``latest_checkpoint`` (a paused
or queued trial resumes from it). The rest is garbage. Selecting it reads only; marking the rows
DELETED is the caller's, through ``lifecycle.delete_checkpoint``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Row, select

from det_airflow.config import CheckpointStorageConfig
from det_airflow.master import experiments, file_cleanup, lifecycle, schema
from det_airflow.master.db import Database

if TYPE_CHECKING:
    from det_airflow.config import ExperimentConfig


def checkpoints_to_delete(conn: Connection, experiment_id: int, cfg: ExperimentConfig) -> list[Row]:
    """The COMPLETED checkpoints of the experiment that its policy does not keep.

    The rows have ``uuid``, ``trial_id`` and ``storage`` (for ``remove_checkpoint_files``) and
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
    keep |= _uuids(_best_first(rows, smaller_is_better)[: policy.save_experiment_best])
    for trial_rows in _by_trial(rows):
        keep |= _uuids(_best_first(trial_rows, smaller_is_better)[: policy.save_trial_best])
        keep |= _uuids(_latest_first(trial_rows)[: policy.save_trial_latest])
    return [row for row in rows if row.uuid not in keep]


def remove_checkpoint_files(conn: Connection, experiment: Row, rows: Iterable[Row]) -> list[str]:
    """Remove each checkpoint's folder, as the owner's identity (master/file_cleanup.py); what
    could not be removed, one line each."""
    identity = file_cleanup.owner_identity(conn, experiment.owner)
    return file_cleanup.remove_checkpoints(experiment, [(row.uuid, row.storage) for row in rows], identity)


def collect(db: Database, experiment_id: int) -> list[str]:
    """Delete what the experiment's policy does not keep: rows first (DELETED, in one transaction),
    then, once that is committed, the folders of ``shared_fs`` storage and the objects of ``s3``
    storage (a ``directory`` storage is a container's own). Returns what could not be removed."""
    with db.begin() as conn:
        exp = experiments.get_experiment(conn, experiment_id)
        cfg = experiments.experiment_config(exp)
        garbage = checkpoints_to_delete(conn, experiment_id, cfg)
        for row in garbage:
            lifecycle.delete_checkpoint(conn, row, _REASON)
    if not garbage or (exp.config.get("checkpoint_storage") or {}).get("type") not in _REMOVED_HERE:
        return []
    with db.begin() as conn:
        return remove_checkpoint_files(conn, exp, garbage)


_REMOVED_HERE = ("shared_fs", "s3")
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
