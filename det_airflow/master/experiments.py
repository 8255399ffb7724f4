"""A stored experiment: its row, its typed config, and its end once its search and trials are over.

Submission is in master/submission.py, the experiment files in master/experiment_files.py, the
changes people ask for in master/experiment_state.py, deletion in master/experiment_deletion.py and
unmanaged runs in master/unmanaged.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, exists, func, select

from det_airflow.config import ExperimentConfig, parse_config
from det_airflow.master import lifecycle, schema
from det_airflow.master.lifecycle import NotFound, now
from det_airflow.states import ExperimentState, TrialState


@functools.lru_cache(maxsize=256)
def _cached_config(experiment_id: int, frozen: str) -> ExperimentConfig:
    return parse_config(json.loads(frozen))


def experiment_config(row: Row) -> ExperimentConfig:
    """The typed config of a stored experiment (parsed once per process)."""
    return _cached_config(row.id, json.dumps(row.config, sort_keys=True))


def get_experiment(conn: Connection, experiment_id: int, *, lock: bool = False) -> Row:
    query = select(schema.experiments).where(schema.experiments.c.id == experiment_id)
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return row


def trial_counts(conn: Connection, experiment_ids: Sequence[int]) -> dict[int, int]:
    """Experiment ID → its count of trials (0 for one without), in one query."""
    if not experiment_ids:
        return {}
    t = schema.trials.c
    query = (
        select(t.experiment_id, func.count())
        .where(t.experiment_id.in_(set(experiment_ids)))
        .group_by(t.experiment_id)
    )
    counted = {experiment_id: count for experiment_id, count in conn.execute(query)}
    return {experiment_id: counted.get(experiment_id, 0) for experiment_id in experiment_ids}


def maybe_finish(conn: Connection, experiment_id: int) -> None:
    """Close the experiment once the search is over and every trial is closed."""
    row = get_experiment(conn, experiment_id)
    if ExperimentState(row.state).is_terminal or not row.search_done:
        return
    states = [
        TrialState(s)
        for s in conn.execute(
            select(schema.trials.c.state).where(schema.trials.c.experiment_id == experiment_id)
        ).scalars()
    ]
    if any(not s.is_terminal for s in states):
        return
    if row.state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        final = ExperimentState.CANCELED
    elif row.error or (states and all(s == TrialState.ERROR for s in states)):
        final = ExperimentState.ERROR
    else:
        final = ExperimentState.COMPLETED
    values: dict[str, Any] = {"end_time": now()}
    if final == ExperimentState.COMPLETED:
        values["progress"] = 1.0
    reason = row.error if final == ExperimentState.ERROR and row.error else "its search and every trial ended"
    lifecycle.move_experiment(conn, row, final, reason, **values)


def finalize(conn: Connection, experiment_id: int, *, why: str | None = None) -> tuple[Row, str | None]:
    """Called when the DAG run's trial tasks are all done: settle whatever is still open (``why``:
    what ended them, when not the tasks themselves)."""
    row = get_experiment(conn, experiment_id, lock=True)
    if not ExperimentState(row.state).is_terminal:
        open_trials = (
            conn.execute(
                select(schema.trials.c.id).where(
                    schema.trials.c.experiment_id == experiment_id,
                    schema.trials.c.state.not_in([s.value for s in TrialState if s.is_terminal]),
                )
            )
            .scalars()
            .all()
        )
        if open_trials or not row.search_done:
            # Their tasks ended without reporting (killed, or failed before the trial started).
            lifecycle.move_trials(
                conn,
                schema.trials.c.id.in_(open_trials),
                TrialState.ERROR,
                why or "its Airflow task ended without reporting the trial's exit",
                end_time=now(),
                token_hash=None,
            )
            values: dict[str, Any] = {"search_done": True}
            if not row.search_done and row.state in (ExperimentState.ACTIVE, ExperimentState.PAUSED):
                values["error"] = (
                    row.error or why or "the experiment's tasks ended before its search finished"
                )
            conn.execute(
                schema.experiments.update().where(schema.experiments.c.id == experiment_id).values(**values)
            )
        maybe_finish(conn, experiment_id)
    cfg = experiment_config(row)
    order = schema.checkpoints.c.validation_metric
    best = conn.execute(
        select(schema.checkpoints.c.uuid)
        .where(
            schema.checkpoints.c.experiment_id == experiment_id,
            schema.checkpoints.c.state == "COMPLETED",
            schema.checkpoints.c.validation_metric.is_not(None),
        )
        .order_by(order.asc() if cfg.searcher.smaller_is_better else order.desc())
        .limit(1)
    ).scalar()
    return get_experiment(conn, experiment_id), best


# --- tasks (notebooks, TensorBoards, commands, shells) run as hidden experiments ---------------------


def not_a_task() -> Any:
    """A WHERE clause that keeps experiments and leaves tasks out."""
    return ~exists().where(schema.tasks.c.id == schema.experiments.c.id)


def task_ids(conn: Connection, ids: Sequence[int]) -> dict[int, str]:
    """Which of these experiment ids are tasks, with their types."""
    if not ids:
        return {}
    t = schema.tasks
    return {
        int(i): str(kind) for i, kind in conn.execute(select(t.c.id, t.c.type).where(t.c.id.in_(list(ids))))
    }
