"""Checkpoint garbage collection: which of an experiment's checkpoints its storage policy keeps.

As in Determined, when a trial ends the experiment keeps, among its COMPLETED checkpoints, the
``save_experiment_best`` best of the whole experiment, the ``save_trial_best`` best of each trial,
the ``save_trial_latest`` latest of each trial, and every trial's ``latest_checkpoint`` (a paused
or queued trial resumes from it),
and every checkpoint registered as a model version. The rest is garbage. Selecting it reads only; marking the rows
DELETED is the caller's, through ``lifecycle.delete_checkpoint``. ``det e set gc-policy`` previews
another policy with the same selection, then stores it (``set_policy``) and collects at once.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from sqlalchemy import Connection, Row, select

from det_airflow.config import CheckpointStorageConfig
from det_airflow.master import experiments, file_cleanup, lifecycle, models_registry, removals, schema
from det_airflow.master.db import Database

if TYPE_CHECKING:
    from det_airflow.config import ExperimentConfig


class Policy(Protocol):
    """The counts a policy keeps: a ``CheckpointStorageConfig``, or one a person asks for."""

    @property
    def save_experiment_best(self) -> int: ...
    @property
    def save_trial_best(self) -> int: ...
    @property
    def save_trial_latest(self) -> int: ...


class Counts(NamedTuple):
    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int


POLICY_FIELDS = Counts._fields
_DEFAULTS = Counts(*(getattr(CheckpointStorageConfig, name) for name in POLICY_FIELDS))


def checkpoints_to_delete(
    conn: Connection, experiment_id: int, cfg: ExperimentConfig, policy: Policy | None = None
) -> list[Row]:
    """The COMPLETED checkpoints of the experiment that its policy (or ``policy``, to preview
    another) does not keep.

    The rows have ``uuid``, ``trial_id`` and ``storage`` (for ``file_cleanup.refused_checkpoints``) and
    ``state`` (for ``lifecycle.delete_checkpoint``), among others.
    """
    if policy is None:
        # No storage section of its own: the policy defaults of the storage config apply.
        policy = cfg.checkpoint_storage or _DEFAULTS
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
        return _collect(conn, experiments.get_experiment(conn, experiment_id))[1]


def set_policy(
    db: Database, experiment_id: int, policy: Policy, check: Callable[[Row], None]
) -> tuple[list[str], list[str]]:
    """Store ``policy`` in the experiment's config (``checkpoint_storage``), as Determined's
    ``det e set gc-policy`` does, and collect at once what it no longer keeps; ``check`` may refuse
    the change on the locked row. Answers (UUIDs deleted, what will not be removed)."""
    table = schema.experiments
    with db.begin() as conn:
        exp = experiments.get_experiment(conn, experiment_id, lock=True)
        check(exp)
        config = copy.deepcopy(exp.config)
        storage = dict(config.get("checkpoint_storage") or {})
        storage.update({name: int(getattr(policy, name)) for name in POLICY_FIELDS})
        config["checkpoint_storage"] = storage
        conn.execute(table.update().where(table.c.id == experiment_id).values(config=config))
        return _collect(conn, experiments.get_experiment(conn, experiment_id))


def _collect(conn: Connection, exp: Row) -> tuple[list[str], list[str]]:
    garbage = checkpoints_to_delete(conn, exp.id, experiments.experiment_config(exp))
    for row in garbage:
        lifecycle.delete_checkpoint(conn, row, _REASON)
    uuids, refused = file_cleanup.refused_checkpoints(exp, [(row.uuid, row.storage) for row in garbage])
    removals.queue_checkpoints(conn, exp, uuids)
    return [row.uuid for row in garbage], refused


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
