"""The changes people ask of an experiment: pause, activate, cancel, kill, archive, unarchive."""

from __future__ import annotations

from sqlalchemy import Connection

from det_airflow.master import experiments, lifecycle, schema, search, unmanaged
from det_airflow.master.lifecycle import StateError, now
from det_airflow.states import ExperimentState, TrialState

_TRANSITIONS: dict[str, tuple[set[ExperimentState], ExperimentState]] = {
    "pause": ({ExperimentState.ACTIVE}, ExperimentState.PAUSED),
    "activate": ({ExperimentState.PAUSED}, ExperimentState.ACTIVE),
    "cancel": ({ExperimentState.ACTIVE, ExperimentState.PAUSED}, ExperimentState.STOPPING_CANCELED),
    "kill": (
        {ExperimentState.ACTIVE, ExperimentState.PAUSED, ExperimentState.STOPPING_CANCELED},
        ExperimentState.STOPPING_KILLED,
    ),
}


def change_state(conn: Connection, experiment_id: int, action: str) -> None:
    """pause / activate / cancel / kill / archive / unarchive."""
    row = experiments.get_experiment(conn, experiment_id, lock=True)
    table = schema.experiments
    if action in ("archive", "unarchive"):
        if action == "archive" and not ExperimentState(row.state).is_terminal:
            raise StateError(
                f"experiment {experiment_id} is {row.state}; only finished experiments can be archived"
            )
        conn.execute(table.update().where(table.c.id == experiment_id).values(archived=action == "archive"))
        return
    unmanaged.refuse_dag_action(row, action)
    allowed, target = _TRANSITIONS[action]
    state = ExperimentState(row.state)
    if state == target:
        return
    if state not in allowed:
        raise StateError(f"experiment {experiment_id} is {state}; cannot {action} it")
    lifecycle.move_experiment(conn, row, target, f"det experiment {action}")
    if target == ExperimentState.ACTIVE and row.searcher_state is None and not unmanaged.is_unmanaged(row):
        # Created paused: its search starts now.
        search.start(conn, experiments.get_experiment(conn, experiment_id))
    if target in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        # Trials that never started will not start now.
        lifecycle.move_trials(
            conn,
            (schema.trials.c.experiment_id == experiment_id)
            & schema.trials.c.state.in_([TrialState.QUEUED, TrialState.PAUSED]),
            TrialState.CANCELED,
            f"its experiment was {'canceled' if action == 'cancel' else 'killed'} before it ran",
            end_time=now(),
            token_hash=None,
        )
        conn.execute(table.update().where(table.c.id == experiment_id).values(search_done=True))
        if unmanaged.is_unmanaged(row):
            unmanaged.end_unmanaged_trials(conn, experiment_id)
        experiments.maybe_finish(conn, experiment_id)
