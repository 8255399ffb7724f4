"""The experiment files in the DAGs folder: written with secrets masked, published once their
experiment is committed, moved out of the parsed folder once their DAG run has ended; and the DAGs
of deleted experiments that Airflow registered again, forgotten."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from sqlalchemy import Connection, select

from det_airflow.dagfactory import (
    dag_id_for_file,
    experiment_dag_id,
    experiment_file,
    retire_experiment_file,
    staged_experiment_file,
    submission_header,
)
from det_airflow.master import airflow_bridge, schema
from det_airflow.master.serialize import masked_config
from det_airflow.states import ExperimentState

if TYPE_CHECKING:
    from det_airflow.master.db import Database

# A staged file older than this was left by an API server that stopped between a create's commit
# and its publication (which takes well under a second).
_STAGED_LEFT_AFTER_SECONDS = 60.0


def publish_left_staged(db: Database) -> list[int]:
    """Publish experiments whose staged file an API server left behind; answers their ids."""
    folder = airflow_bridge.dags_folder()
    published = []
    for staged in experiment_file(folder, 0).parent.glob(".exp_*.yaml"):
        file = dag_id_for_file(staged.with_name(staged.name[1:]), folder)
        try:
            left = time.time() - staged.stat().st_mtime > _STAGED_LEFT_AFTER_SECONDS
        except FileNotFoundError:
            continue  # published meanwhile
        if file.experiment_id is not None and left:
            publish_submitted(db, file.experiment_id)
            published.append(file.experiment_id)
    return published


def publish_submitted(db: Database, experiment_id: int, queues: dict[int, str] | None = None) -> None:
    """Once a created experiment is committed: its DAG into Airflow's tables with its run started
    (``queues``: the hosts' queues of the slots given their first trials), then its staged file
    where parses find it. In that order, the DAG processor only ever updates the DAG the master
    wrote; the two never race to insert it (a lost race stops Airflow's DAG processor).

    The run's id is recorded at once: a run that fails or is deleted in Airflow before any of its
    slots asked for a trial then ends the experiment (``end experiments ended in Airflow``)."""
    folder = airflow_bridge.dags_folder()
    staged = staged_experiment_file(folder, experiment_id)
    published = airflow_bridge.publish_experiment_dag(experiment_id, staged, queues)
    os.replace(staged, experiment_file(folder, experiment_id))
    if published.run_id is not None:
        _record_run(db, {experiment_id: published.run_id})
    if not published.dag:
        airflow_bridge.request_reparse()


def _record_run(db: Database, runs: dict[int, str]) -> None:
    """Link experiments to the DAG runs the master started for them (unless linked meanwhile)."""
    exps = schema.experiments
    with db.begin() as conn:
        for experiment_id, run_id in runs.items():
            conn.execute(
                exps.update()
                .where(exps.c.id == experiment_id, exps.c.dag_run_id.is_(None))
                .values(dag_run_id=run_id)
            )


def start_missing_runs(db: Database) -> list[int]:
    """Start the run of every unended `det experiment create` experiment whose DAG Airflow holds
    without a run (its start failed as its DAG was written, or only a parse wrote the DAG), and
    link it; answers their ids. The DAG has no schedule: nothing else would start it."""
    exps = schema.experiments
    with db.read() as conn:
        rows = conn.execute(
            select(exps.c.id, exps.c.dag_id).where(
                exps.c.dag_run_id.is_(None),
                exps.c.state.not_in(
                    [s.value for s in ExperimentState if s.is_terminal or s == ExperimentState.DELETING]
                ),
            )
        ).all()
    created = {r.dag_id: int(r.id) for r in rows if r.dag_id == experiment_dag_id(r.id)}
    started = airflow_bridge.start_missing_runs(sorted(created))
    _record_run(db, {created[d]: airflow_bridge.experiment_run_id(d) for d in started})
    return [created[d] for d in started]


# The experiment files in the DAGs folder and their folders: the master's user and group only.
EXPERIMENT_FILE_MODE = 0o640
EXPERIMENT_DIR_MODE = 0o750


def write_experiment_file(
    experiment_id: int,
    config: dict[str, Any],
    path: Path | None = None,
    *,
    submission: tuple[str, datetime, int | None] | None = None,
) -> None:
    """The file the DAG factory compiles (or ``path``, e.g. its retired copy). Secrets are masked: the
    DAGs folder is readable by every Airflow component and often by people, and trials get the full
    config from the master. `submission` (owner, time, trial slots) becomes the DAG's owner, run date
    and number of trial slots."""
    path = path or experiment_file(airflow_bridge.dags_folder(), experiment_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=EXPERIMENT_DIR_MODE)
    # Other local users (trials run as their own uids) have no business reading configs: the DAG
    # processor runs as the master's uid (or its group), so owner and group are enough.
    os.chmod(path.parent, EXPERIMENT_DIR_MODE)
    tmp = path.with_name(path.name + ".tmp")
    text = (
        f"# Experiment {experiment_id}, written by the det master. Do not edit.\n"
        + (submission_header(*submission) if submission else "")
        + yaml.safe_dump(masked_config(config), sort_keys=False)
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, EXPERIMENT_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), EXPERIMENT_FILE_MODE)
        f.write(text)
    os.replace(tmp, path)


def retire_finished_experiment_files(conn: Connection) -> list[int]:
    """Move the configs of experiments whose DAG run has ended out of the parsed DAGs folder.

    Parsing then grows with the experiments still to run, not with every experiment ever created
    (benchmarks/dag_parse.py). Only after the run has ended: its last tasks need the DAG.
    Returns the ids retired.
    """
    folder = airflow_bridge.dags_folder()
    candidates: dict[int, Path] = {}
    for path in experiment_file(folder, 0).parent.glob("exp_*.yaml"):
        file = dag_id_for_file(path, folder)
        if file.experiment_id is not None:
            candidates[file.experiment_id] = path
    if not candidates:
        return []
    rows = conn.execute(
        select(
            schema.experiments.c.id,
            schema.experiments.c.state,
            schema.experiments.c.dag_id,
            schema.experiments.c.dag_run_id,
        ).where(schema.experiments.c.id.in_(list(candidates)))
    ).all()
    ended = [r for r in rows if ExperimentState(r.state).is_terminal and r.dag_run_id]
    finished = airflow_bridge.finished_dag_runs([(r.dag_id, r.dag_run_id) for r in ended])
    retired = []
    for r in ended:
        if (r.dag_id, r.dag_run_id) in finished and retire_experiment_file(folder, r.id) is not None:
            retired.append(int(r.id))
    return retired


#: How long a deleted experiment's stale DAG must have gone unparsed before it is deleted: longer
#: than a parse of the factory takes, so that none still in flight writes it back.
STALE_QUIET_SECONDS = 20.0


def forget_deleted_experiment_dags(conn: Connection) -> list[str]:
    """Delete the DAGs of deleted experiments, with their runs; returns their ids.

    `det e delete` removes an experiment's file and leaves its DAG to this job: such a DAG (an
    experiment DAG id whose experiment row is gone) is deleted once Airflow marks it stale and no
    parse has written it for ``STALE_QUIET_SECONDS``, so that no parse in flight writes a DAG row
    deleted under it. An experiment id is never reused, so no experiment of today owns them.
    """
    prefix = experiment_dag_id(0).removesuffix("0")
    candidates: dict[int, str] = {}
    for dag_id in airflow_bridge.stale_dags(prefix, quiet_seconds=STALE_QUIET_SECONDS):
        number = dag_id.removeprefix(prefix)
        if number.isdigit():
            candidates[int(number)] = dag_id
    if not candidates:
        return []
    kept = set(
        conn.execute(
            select(schema.experiments.c.id).where(schema.experiments.c.id.in_(list(candidates)))
        ).scalars()
    )
    forgotten = []
    for experiment_id, dag_id in sorted(candidates.items()):
        if experiment_id not in kept:
            airflow_bridge.delete_dag(dag_id)
            forgotten.append(dag_id)
    return forgotten
