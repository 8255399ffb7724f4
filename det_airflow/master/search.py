"""Drives an experiment's search method: feeds it events, applies its actions, stores its state."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow.master import experiments, lifecycle, schema
from det_airflow.searcher import (
    Create,
    Pause,
    Resume,
    SearcherError,
    SearchMethod,
    Shutdown,
    Stop,
    load_search_method,
    make_search_method,
)
from det_airflow.states import ExperimentState, TrialState

Event = Callable[[SearchMethod], Sequence[Any]]


OPTUNA_SCHEMA = "det_optuna"


def optuna_storage_url(database_url: str) -> str:
    """Where experiments' optuna studies live, so `optuna-dashboard <url>` opens them.

    PostgreSQL: the same database, in its own schema (optuna keeps an `alembic_version` table, as
    Airflow does). SQLite: a file beside Airflow's (one SQLite file has one writer, and the master
    writes while it asks optuna).
    """
    if database_url.startswith("sqlite"):
        path = Path(database_url.split(":///", 1)[1])
        return f"sqlite:///{path.with_name('det_optuna.db')}"
    if database_url.startswith("postgres"):
        separator = "&" if "?" in database_url else "?"
        return f"{database_url}{separator}options=-csearch_path%3D{OPTUNA_SCHEMA}"
    return database_url


def ensure_optuna_schema(engine: Any) -> None:
    if engine.dialect.name == "postgresql":
        from sqlalchemy import text

        with engine.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {OPTUNA_SCHEMA}"))


@functools.cache
def _optuna_storage(url: str) -> Any:
    import optuna

    from det_airflow.master.db import get_database

    ensure_optuna_schema(get_database().engine)
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def study_name(experiment_id: int) -> str:
    """The optuna study of an experiment whose searcher samples with optuna."""
    return f"det-experiment-{experiment_id}"


def delete_study(experiment_id: int) -> bool:
    """Remove the experiment's optuna study; False when there was none."""
    import optuna

    from det_airflow.master.db import get_database

    try:
        optuna.delete_study(
            study_name=study_name(experiment_id),
            storage=_optuna_storage(optuna_storage_url(get_database().url)),
        )
    except KeyError:
        return False
    return True


def method_for(row: Row, *, fresh: bool = False) -> SearchMethod:
    """The experiment's search method, as stored (or new, to start the search)."""
    from det_airflow.master.db import get_database

    cfg = experiments.experiment_config(row)
    kwargs: dict[str, Any] = {}
    if cfg.searcher.sampler != "random":
        kwargs = {
            "optuna_storage": _optuna_storage(optuna_storage_url(get_database().url)),
            "study_name": study_name(row.id),
        }
    if fresh:
        return make_search_method(cfg, **kwargs)
    return load_search_method(cfg, row.searcher_state, **kwargs)


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
    values: dict[str, Any] = {}
    try:
        method = method_for(row, fresh=fresh)
        pending = list(event(method))
        while pending:
            action = pending.pop(0)
            if isinstance(action, Create):
                _create_trial(conn, row.id, action)
                pending.extend(method.trial_created(action.request_id))
            elif isinstance(action, Stop):
                pending.extend(_stop_trial(conn, row.id, action.request_id, method))
            elif isinstance(action, Pause):
                _trial_where(conn, row.id, action.request_id, pause_requested=True)
            elif isinstance(action, Resume):
                _resume_trial(conn, row.id, action.request_id)
            elif isinstance(action, Shutdown):
                values["search_done"] = True
                if action.failure:
                    values["error"] = "every trial of the experiment failed"
        values["searcher_state"] = method.state_dict()
        values["progress"] = method.progress()
    except SearcherError as exc:
        # e.g. adaptive search got a validation without its metric: the experiment ends with that message.
        values.update(search_done=True, error=str(exc))
        if row.searcher_state is None:
            values["searcher_state"] = {}
        if row.state in (ExperimentState.ACTIVE, ExperimentState.PAUSED):
            lifecycle.move_experiment(conn, row, ExperimentState.STOPPING_ERROR, f"its search failed: {exc}")
        lifecycle.move_trials(
            conn,
            (schema.trials.c.experiment_id == row.id) & (schema.trials.c.state == TrialState.QUEUED),
            TrialState.CANCELED,
            "its experiment's search failed before it ran",
            end_time=lifecycle.now(),
        )
    conn.execute(schema.experiments.update().where(schema.experiments.c.id == row.id).values(**values))
    if values.get("search_done"):
        experiments.maybe_finish(conn, row.id)


def _trial_where(conn: Connection, experiment_id: int, request_id: int, **values: Any) -> None:
    conn.execute(
        schema.trials.update()
        .where(schema.trials.c.experiment_id == experiment_id, schema.trials.c.request_id == request_id)
        .values(**values)
    )


def _stop_trial(conn: Connection, experiment_id: int, request_id: int, method: SearchMethod) -> Sequence[Any]:
    """A running trial gets the preemption signal and exits; one waiting at a rung is closed now."""
    trial = conn.execute(
        select(schema.trials).where(
            schema.trials.c.experiment_id == experiment_id, schema.trials.c.request_id == request_id
        )
    ).first()
    if trial is None or TrialState(trial.state).is_terminal:
        return []
    if trial.state == TrialState.PAUSED or (trial.state == TrialState.QUEUED and trial.slot is None):
        lifecycle.move_trial(
            conn,
            trial,
            TrialState.COMPLETED,
            "the search stopped it at its rung",
            end_time=lifecycle.now(),
            token_hash=None,
        )
        return method.trial_exited(request_id)
    _trial_where(conn, experiment_id, request_id, stop_requested=True)
    return []


def _resume_trial(conn: Connection, experiment_id: int, request_id: int) -> None:
    """Promoted: a trial waiting at its rung is queued again on its slot (resuming its checkpoint)."""
    trial = conn.execute(
        select(schema.trials).where(
            schema.trials.c.experiment_id == experiment_id, schema.trials.c.request_id == request_id
        )
    ).first()
    if trial is None or TrialState(trial.state).is_terminal:
        return
    values: dict[str, Any] = {"pause_requested": False, "op_completed": False}
    if trial.state == TrialState.PAUSED:
        lifecycle.move_trial(conn, trial, TrialState.QUEUED, "the search promoted it", **values)
    else:
        _trial_where(conn, experiment_id, request_id, **values)


def _create_trial(conn: Connection, experiment_id: int, action: Create) -> None:
    exists = conn.execute(
        select(schema.trials.c.id).where(
            schema.trials.c.experiment_id == experiment_id, schema.trials.c.request_id == action.request_id
        )
    ).first()
    if exists:
        return
    created = conn.execute(
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
            pause_requested=False,
            op_completed=False,
        )
    )
    trial_id = int(created.inserted_primary_key[0])  # type: ignore[index]
    lifecycle.trial_created(
        conn, trial_id, TrialState.QUEUED, f"the searcher created it (request {action.request_id})"
    )
