"""Drives an experiment's search method: feeds it events, applies its actions, stores its state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow.master import experiments, schema
from det_airflow.searcher import (
    Create,
    SearcherError,
    SearchMethod,
    Shutdown,
    Stop,
    load_search_method,
    make_search_method,
)
from det_airflow.states import ExperimentState, TrialState

Event = Callable[[SearchMethod], Sequence[Any]]


def start(conn: Connection, row: Row) -> None:
    """Start the search (its initial trials) if it has not started yet."""
    if row.searcher_state is not None:
        return
    _run(conn, row, lambda method: method.initial_trials(), fresh=True)


def send(conn: Connection, experiment_id: int, event: Event) -> None:
    """Deliver one event to a started search; the experiment row is locked for the duration."""
    row = experiments.get_experiment(conn, experiment_id, lock=True)
    if row.searcher_state is None or row.search_done:
        return
    _run(conn, row, event, fresh=False)


def _run(conn: Connection, row: Row, event: Event, *, fresh: bool) -> None:
    cfg = experiments.experiment_config(row)
    values: dict[str, Any] = {}
    try:
        method = make_search_method(cfg) if fresh else load_search_method(cfg, row.searcher_state)
        pending = list(event(method))
        while pending:
            action = pending.pop(0)
            if isinstance(action, Create):
                _create_trial(conn, row.id, action)
                pending.extend(method.trial_created(action.request_id))
            elif isinstance(action, Stop):
                conn.execute(
                    schema.trials.update()
                    .where(
                        schema.trials.c.experiment_id == row.id,
                        schema.trials.c.request_id == action.request_id,
                    )
                    .values(stop_requested=True)
                )
            elif isinstance(action, Shutdown):
                values["search_done"] = True
                if action.failure:
                    values["error"] = "every trial of the experiment failed"
        values["searcher_state"] = method.state_dict()
        values["progress"] = method.progress()
    except SearcherError as exc:
        # e.g. the searcher metric is missing: the experiment ends with that message.
        values.update(search_done=True, error=str(exc), state=ExperimentState.STOPPING_ERROR)
        if row.searcher_state is None:
            values["searcher_state"] = {}
    conn.execute(schema.experiments.update().where(schema.experiments.c.id == row.id).values(**values))
    if values.get("search_done"):
        if values.get("state") == ExperimentState.STOPPING_ERROR:
            conn.execute(
                schema.trials.update()
                .where(schema.trials.c.experiment_id == row.id, schema.trials.c.state == TrialState.QUEUED)
                .values(state=TrialState.CANCELED, end_time=experiments.now())
            )
        experiments.maybe_finish(conn, row.id)


def _create_trial(conn: Connection, experiment_id: int, action: Create) -> None:
    exists = conn.execute(
        select(schema.trials.c.id).where(
            schema.trials.c.experiment_id == experiment_id, schema.trials.c.request_id == action.request_id
        )
    ).first()
    if exists:
        return
    conn.execute(
        schema.trials.insert().values(
            experiment_id=experiment_id,
            request_id=action.request_id,
            state=TrialState.QUEUED,
            hparams=action.hparams,
            trial_seed=action.trial_seed,
            total_batches=0,
            restarts=0,
            run_id=0,
            progress=0.0,
            summary={},
            stop_requested=False,
            op_completed=False,
        )
    )
