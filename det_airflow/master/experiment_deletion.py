"""Deleting an ended experiment with everything it owned: its files on disk, its optuna study,
its records in Airflow and in the det tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Row, select
from sqlalchemy.exc import SQLAlchemyError

from det_airflow.dagfactory import FINISHED_SUBDIR, experiment_dag_id, experiment_file
from det_airflow.master import (
    airflow_bridge,
    experiments,
    file_cleanup,
    lifecycle,
    models_registry,
    removals,
    schema,
    search,
)
from det_airflow.master.lifecycle import StateError
from det_airflow.states import ExperimentState

if TYPE_CHECKING:
    from det_airflow.master.db import Database


def delete_experiment(db: Database, experiment_id: int) -> tuple[list[str], list[str]]:
    """Remove an ended experiment and everything it owned; answers ``(not_removed, removing)``:
    what could not be removed, and the files queued for removal by the hosts that have them
    (master/removals.py), in the transaction that deletes the rows.

    Airflow's records and the optuna study go first and the rows last, so after a failure part way
    the experiment is still listed and the delete can be run again.
    """
    with db.read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
        checkpoints = conn.execute(
            select(schema.checkpoints.c.uuid, schema.checkpoints.c.storage, schema.checkpoints.c.state).where(
                schema.checkpoints.c.experiment_id == experiment_id
            )
        ).all()
    if not ExperimentState(row.state).is_terminal:
        raise StateError(f"experiment {experiment_id} is {row.state}; cancel or kill it before deleting it")
    with db.read() as conn:
        _check_nothing_registered(conn, experiment_id)
    own_dag = row.dag_id == experiment_dag_id(row.id)
    # Its own DAG may have a run it never registered (killed first); a shared DAG, only its run.
    running = (
        airflow_bridge.running_dag_runs(row.dag_id, None if own_dag else row.dag_run_id)
        if own_dag or (row.dag_id and row.dag_run_id)
        else []
    )
    if running:
        raise StateError(
            f"experiment {experiment_id} is {row.state}, but its DAG run '{running[0]}' of DAG "
            f"'{row.dag_id}' is still running in Airflow; delete the experiment once that run has ended"
        )
    # A DELETED checkpoint's removal was queued when it was deleted.
    kept = [(c.uuid, c.storage) for c in checkpoints if c.state != "DELETED"]
    uuids, refused = file_cleanup.refused_checkpoints(row, kept)
    not_removed = [*_remove_airflow_records(row), *_remove_optuna_study(row), *refused]
    with db.begin() as conn:
        experiments.get_experiment(conn, experiment_id, lock=True)
        _check_nothing_registered(conn, experiment_id)
        removing = [
            *removals.queue_checkpoints(conn, row, uuids),
            *removals.queue_tensorboard(conn, row),
            *removals.queue_work_dirs(conn, row),
        ]
        trial_ids = select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
        lifecycle.forget(conn, "experiment", [experiment_id])
        lifecycle.forget(conn, "trial", conn.execute(trial_ids).scalars().all())
        lifecycle.forget(conn, "checkpoint", [c.uuid for c in checkpoints])
        for table in (schema.trial_logs, schema.metrics, schema.checkpoints):
            conn.execute(table.delete().where(table.c.trial_id.in_(trial_ids)))
        conn.execute(schema.trials.delete().where(schema.trials.c.experiment_id == experiment_id))
        conn.execute(schema.experiments.delete().where(schema.experiments.c.id == experiment_id))
    return not_removed, removing


def _check_nothing_registered(conn: Connection, experiment_id: int) -> None:
    """Refuse while a model version holds one of its checkpoints, as Determined does."""
    held = models_registry.registered_in_experiment(conn, experiment_id)
    if held:
        uuid, version = next(iter(held.items()))
        more = f" and {len(held) - 1} more" if len(held) > 1 else ""
        raise StateError(
            f"experiment {experiment_id} has checkpoints registered as model versions (checkpoint "
            f"{uuid} is {version}{more}); delete those versions before deleting the experiment"
        )


def _remove_airflow_records(row: Row) -> list[str]:
    """The experiment's own DAG (`det experiment create`), or only its run of a shared DAG.

    An experiment's own DAG is not deleted here: only its file. The DAG processor may be writing
    the factory's DAGs back at this moment, and a DAG row deleted under it fails that write and
    stops the DAG processor (Airflow's own DAG delete has the same race). The parse requested here
    marks the DAG stale; the master's `forget deleted experiments' DAGs` then deletes it with its
    runs once no parse has touched it for a while (experiment_files.forget_deleted_experiment_dags).
    """
    try:
        if row.dag_id == experiment_dag_id(row.id):
            path = experiment_file(airflow_bridge.dags_folder(), row.id)
            retired = path.parent / FINISHED_SUBDIR / path.name
            try:
                path.unlink(missing_ok=True)
                retired.unlink(missing_ok=True)
            except OSError as exc:
                return [f"experiment file {path}: {exc.strerror or exc}; so its DAG '{row.dag_id}' was kept"]
            airflow_bridge.request_reparse()
        elif row.dag_id and row.dag_run_id:
            # A YAML under dags/ is the user's: its DAG stays for the runs it still has.
            airflow_bridge.delete_dag_run(row.dag_id, row.dag_run_id)
    except airflow_bridge.AirflowRecordError as exc:
        return [str(exc)]
    return []


def _remove_optuna_study(row: Row) -> list[str]:
    if experiments.experiment_config(row).searcher.sampler == "random":
        return []  # random sampling keeps no optuna study
    try:
        search.delete_study(row.id)
    except SQLAlchemyError as exc:
        return [f"optuna study '{search.study_name(row.id)}': {exc.__class__.__name__}: {exc}"]
    return []
