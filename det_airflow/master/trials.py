"""Trials: the slot protocol, runs and exits, and what training code reports."""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, select

from det_airflow.master import experiments, metric_points, queue, schema, search
from det_airflow.master.auth import hash_token, new_token
from det_airflow.master.bodies import MAX_STEPS
from det_airflow.master.db import Database
from det_airflow.master.experiments import NotFound, now
from det_airflow.searcher import ExitedReason, SearchMethod
from det_airflow.states import ExperimentState, TrialState

_OPEN = [s.value for s in TrialState if not s.is_terminal]
_STOPPING = {
    ExperimentState.STOPPING_CANCELED,
    ExperimentState.STOPPING_KILLED,
    ExperimentState.STOPPING_ERROR,
    ExperimentState.STOPPING_COMPLETED,
}


def get_trial(conn: Connection, trial_id: int, *, lock: bool = False) -> Row:
    query = select(schema.trials).where(schema.trials.c.id == trial_id)
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    return row


def _update(conn: Connection, trial_id: int, **values: Any) -> None:
    conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(**values))


# --- the slot protocol -------------------------------------------------------------------------


def acquire(conn: Connection, experiment_id: int, slot: int, task: dict[str, Any], *, dry_run: bool) -> dict:
    """Give a trial slot its trial: the one it holds, else the oldest one nobody holds.

    The first slot of a `det experiment create` run to ask links the run to its experiment (the
    master started its search at submission: no task runs before the trial slots).
    """
    exp = experiments.get_experiment(conn, experiment_id, lock=not dry_run)
    if task.get("run_id") and exp.dag_run_id != task["run_id"]:
        if exp.dag_run_id is not None:
            return {
                "status": "refused",
                "message": f"experiment {experiment_id} already runs as DAG run '{exp.dag_run_id}'; "
                "create a new experiment with `det experiment create` instead of re-triggering its DAG",
            }
        if not dry_run:
            conn.execute(
                schema.experiments.update()
                .where(schema.experiments.c.id == experiment_id)
                .values(dag_run_id=task["run_id"])
            )
    state = ExperimentState(exp.state)
    if state.is_terminal or state in _STOPPING:
        return {"status": "done"}
    if state == ExperimentState.PAUSED:
        return {"status": "wait"}
    trials = schema.trials
    trial = conn.execute(
        select(trials).where(
            trials.c.experiment_id == experiment_id, trials.c.slot == slot, trials.c.state.in_(_OPEN)
        )
    ).first()
    if trial is not None and trial.state == TrialState.PAUSED and trial.pause_requested:
        return {"status": "wait"}  # waits at its rung until the search promotes or closes it
    if trial is None:
        trial = conn.execute(
            select(trials)
            .where(
                trials.c.experiment_id == experiment_id,
                trials.c.slot.is_(None),
                trials.c.state.in_(_OPEN),
                trials.c.pause_requested.is_(False),
            )
            .order_by(trials.c.id)
            .limit(1)
        ).first()
    if trial is None:
        if not exp.search_done:
            reclaim_lost_runs(conn, exp.resource_pool)  # the search may be waiting on a lost run
        return {"status": "done" if exp.search_done else "wait"}
    if not _admitted(conn, exp, trial):
        return {"status": "wait"}  # the job queue has not admitted it: it defers, holding no pool slot
    if dry_run:
        return {"status": "run"}
    token = new_token()
    _update(
        conn,
        trial.id,
        slot=slot,
        state=TrialState.RUNNING,
        start_time=trial.start_time or now(),
        token_hash=hash_token(token),
        run_id=trial.run_id + 1,
        task=task,
    )
    trial = get_trial(conn, trial.id)
    return {"status": "run", "trial": trial, "token": token, "spec": trial_spec(conn, exp, trial)}


def _admitted(conn: Connection, exp: Row, trial: Row) -> bool:
    """Ask the queue; when it says no, free the slots of lost runs or preempt lower-priority trials
    and ask again (a preempted trial that had not started frees its slots at once)."""
    if queue.admit(conn, exp, trial):
        return True
    if reclaim_lost_runs(conn, exp.resource_pool) and queue.admit(conn, exp, trial):
        return True
    return bool(_preempt_for_waiting(conn, exp.resource_pool)) and queue.admit(conn, exp, trial)


def _preempt_for_waiting(conn: Connection, pool: str) -> dict[int, int]:
    """Make room for waiting higher-priority jobs, telling each preempted trial why in its logs."""
    chosen = queue.preempt_for_waiting(conn, pool)
    for trial_id, job_id in chosen.items():
        append_logs(
            conn,
            trial_id,
            [
                {
                    "level": "WARNING",
                    "message": f"preempted: experiment {job_id} of higher priority needs the slots of "
                    f"pool '{pool}'; this trial waits in the queue (a running one checkpoints and "
                    "exits first) and resumes from its latest checkpoint",
                }
            ],
        )
    return chosen


# A running trial's poll looks for preemptions in its pool at most this often (per API server process).
_PREEMPT_EVERY_SECONDS = 2.0
_last_preempt: dict[str, float] = {}


def make_room_if_due(db: Database, trial_id: int) -> None:
    """Preempt for the waiting jobs of the trial's pool, if that pool preempts and it is time.

    The polls of running trials drive this, not only the waiting trial: a waiting job's task may
    not even start while the trials it should preempt fill its Airflow pool.
    """
    try:
        if not queue.preemption_anywhere():
            return  # the default: a running trial's poll costs no query for it
    except queue.QueueConfigError as exc:
        # A running trial's poll must not fail for it: the waiting trials' tasks report it.
        logging.getLogger(__name__).error("%s", exc)
        return
    with db.read() as conn:
        pool = conn.execute(
            select(schema.experiments.c.resource_pool)
            .join(schema.trials, schema.trials.c.experiment_id == schema.experiments.c.id)
            .where(schema.trials.c.id == trial_id)
        ).scalar()
    now_s = time.monotonic()
    if pool is None or now_s - _last_preempt.get(pool, -math.inf) < _PREEMPT_EVERY_SECONDS:
        return
    _last_preempt[pool] = now_s
    if not queue.preemption_enabled(pool):
        return
    with db.begin() as conn:
        _preempt_for_waiting(conn, pool)


# Task instance states in which the task no longer runs the trial it last acquired.
_TASK_ENDED = {"success", "failed", "skipped", "upstream_failed", "removed"}
# A waiting slot looks for lost runs at most this often (per pool, per API server process).
_RECLAIM_EVERY_SECONDS = 5.0
_last_reclaim: dict[str, float] = {}


def reclaim_lost_runs(conn: Connection, pool: str) -> list[int]:
    """Close the runs whose Airflow task ended without reporting the trial's exit; returns their ids.

    A worker that dies, or a task that fails while the API server is away, leaves its trial
    RUNNING and holding pool slots, so the trials queued behind it and a search waiting for its
    result would wait forever. Such a run ends as a failed run: the trial restarts from its latest
    checkpoint in whichever slot is free (within max_restarts), else ends ERROR.
    """
    import time

    from det_airflow.master import airflow_bridge

    now_s = time.monotonic()
    if now_s - _last_reclaim.get(pool, -math.inf) < _RECLAIM_EVERY_SECONDS:
        return []
    _last_reclaim[pool] = now_s
    trials, exps = schema.trials, schema.experiments
    rows = conn.execute(
        select(trials.c.id, trials.c.task)
        .join(exps, exps.c.id == trials.c.experiment_id)
        .where(
            exps.c.resource_pool == pool,
            trials.c.state.in_([TrialState.RUNNING, TrialState.STOPPING_KILLED]),
            trials.c.task.is_not(None),
        )
    ).all()
    # trial id → (its task instance's key, the try that acquired it)
    runs: dict[int, tuple[tuple[str, str, str, int], int]] = {}
    for trial_id, task in rows:
        if all((task or {}).get(k) is not None for k in ("dag_id", "run_id", "task_id", "map_index")):
            key = (task["dag_id"], task["run_id"], task["task_id"], int(task["map_index"]))
            runs[trial_id] = (key, int(task.get("try_number", 1)))
    states = airflow_bridge.task_instance_states(sorted({key for key, _ in runs.values()}))
    lost = []
    for trial_id, (key, acquired_by) in runs.items():
        state, try_number = states.get(key, (None, 0))
        if state not in _TASK_ENDED or try_number != acquired_by:
            continue  # still running, gone, or a newer try will take the trial back in its slot
        trial, _ = exit_run(conn, trial_id, _LOST_EXIT_CODE)
        if trial.state == TrialState.QUEUED:
            _update(conn, trial_id, slot=None)  # no try of that task will come for it: any free slot
        append_logs(
            conn,
            trial_id,
            [
                {
                    "level": "ERROR",
                    "message": f"its task {'/'.join(map(str, key))} ended {state} without reporting "
                    f"the trial's exit (a lost worker or API server); the trial is now {trial.state}",
                }
            ],
        )
        lost.append(int(trial_id))
    return lost


_LOST_EXIT_CODE = -1


def trial_spec(conn: Connection, exp: Row, trial: Row) -> dict[str, Any]:
    """Everything the trial process needs (det_airflow.trial_process.TrialSpec)."""
    cfg = experiments.experiment_config(exp)
    latest = trial.latest_checkpoint
    steps = 0
    if latest is None:
        latest = _warm_start_checkpoint(conn, cfg)
    if latest is not None:
        steps = (
            conn.execute(
                select(schema.checkpoints.c.steps_completed).where(schema.checkpoints.c.uuid == latest)
            ).scalar()
            or 0
        )
        if trial.latest_checkpoint is None:
            steps = 0  # a warm start begins a new trial: its own count starts at zero
    return {
        "trial_id": trial.id,
        "experiment_id": exp.id,
        "request_id": trial.request_id,
        "trial_seed": trial.trial_seed,
        "hparams": trial.hparams,
        "config": exp.config,
        "latest_checkpoint": latest,
        "steps_completed": steps,
        "run_id": trial.run_id,
    }


def _warm_start_checkpoint(conn: Connection, cfg: Any) -> str | None:
    if cfg.searcher.source_checkpoint_uuid:
        return cfg.searcher.source_checkpoint_uuid
    if cfg.searcher.source_trial_id is not None:
        return conn.execute(
            select(schema.trials.c.latest_checkpoint).where(
                schema.trials.c.id == cfg.searcher.source_trial_id
            )
        ).scalar()
    return None


def exit_run(conn: Connection, trial_id: int, exit_code: int) -> tuple[Row, bool]:
    """A trial's process ended; returns (trial, whether Airflow should retry the task)."""
    trial = get_trial(conn, trial_id)
    exp = experiments.get_experiment(conn, trial.experiment_id, lock=True)
    trial = get_trial(conn, trial_id, lock=True)
    if TrialState(trial.state).is_terminal:
        return trial, False
    cfg = experiments.experiment_config(exp)
    exp_state = ExperimentState(exp.state)
    event = None
    preempted = trial.preempt_requested_at is not None
    if preempted:
        _update(conn, trial_id, preempt_requested_at=None)
    if trial.state == TrialState.STOPPING_KILLED:  # `det trial kill`: whatever the exit, no retry
        state, event = TrialState.CANCELED, ExitedReason.USER_CANCELED
    elif trial.early_exit == "INVALID_HP":
        state, event = TrialState.COMPLETED, ExitedReason.INVALID_HP
    elif (
        preempted
        and exp_state == ExperimentState.ACTIVE
        and not (trial.stop_requested or trial.pause_requested)
    ):
        # Preempted by the queue: back to waiting, resumed from its checkpoint once admitted again.
        # Whatever the exit (one that ignored the signal was killed), it counts no restart.
        _update(conn, trial_id, state=TrialState.QUEUED, token_hash=None)
        return get_trial(conn, trial_id), False
    elif not trial.stop_requested and (
        exp_state == ExperimentState.PAUSED or (exit_code == 0 and trial.pause_requested)
    ):
        # Preempted by a pause. The experiment's: whatever the exit (a trial that ignored the pause
        # past preemption_timeout was killed) it counts no restart, keeps its slot and resumes from
        # its latest checkpoint once the experiment is active. The search's, at a rung: its slot goes
        # on to other trials, and whichever slot is free resumes it once the search promotes it.
        slot = None if exp_state == ExperimentState.ACTIVE else trial.slot
        _update(conn, trial_id, state=TrialState.PAUSED, token_hash=None, slot=slot)
        return get_trial(conn, trial_id), False
    elif exit_code == 0:
        if exp_state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
            state, event = TrialState.CANCELED, ExitedReason.USER_CANCELED
        elif trial.early_exit == "USER_REQUESTED_STOP":
            state, event = TrialState.COMPLETED, ExitedReason.USER_CANCELED
        else:
            state = TrialState.COMPLETED
    else:
        restarts = trial.restarts + 1
        _update(conn, trial_id, restarts=restarts)
        if restarts > cfg.max_restarts or exp_state.is_terminal or exp_state in _STOPPING:
            state, event = TrialState.ERROR, ExitedReason.ERRORED
        else:
            _update(conn, trial_id, state=TrialState.QUEUED, token_hash=None)
            return get_trial(conn, trial_id), True
    _update(conn, trial_id, state=state, end_time=now(), token_hash=None)
    if event is None:
        search.send(conn, exp.id, lambda m: m.trial_exited(trial.request_id))
    else:
        search.send(conn, exp.id, lambda m: m.trial_exited_early(trial.request_id, event))
    experiments.maybe_finish(conn, exp.id)
    return get_trial(conn, trial_id), False


def kill_trial(conn: Connection, trial_id: int) -> Row:
    """Stop one trial now: a running one is STOPPING_KILLED (its task kills the process and it ends
    CANCELED); one that is not running ends CANCELED at once. The search method hears a user cancel."""
    trial = get_trial(conn, trial_id)
    experiments.get_experiment(conn, trial.experiment_id, lock=True)
    trial = get_trial(conn, trial_id, lock=True)
    state = TrialState(trial.state)
    if state.is_terminal or state == TrialState.STOPPING_KILLED:
        return trial
    if state in (TrialState.QUEUED, TrialState.PAUSED):
        _update(
            conn, trial_id, state=TrialState.CANCELED, stop_requested=True, end_time=now(), token_hash=None
        )
        search.send(
            conn,
            trial.experiment_id,
            lambda m: m.trial_exited_early(trial.request_id, ExitedReason.USER_CANCELED),
        )
        experiments.maybe_finish(conn, trial.experiment_id)
    else:
        _update(conn, trial_id, state=TrialState.STOPPING_KILLED, stop_requested=True)
    return get_trial(conn, trial_id)


def should_preempt(conn: Connection, trial_id: int) -> bool:
    trial = get_trial(conn, trial_id)
    state = conn.execute(
        select(schema.experiments.c.state).where(schema.experiments.c.id == trial.experiment_id)
    ).scalar_one()
    return (
        bool(trial.stop_requested or trial.pause_requested)
        or trial.preempt_requested_at is not None
        or ExperimentState(state) != ExperimentState.ACTIVE
    )


# --- reports from training code ----------------------------------------------------------------


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def report_metrics(conn: Connection, trial_id: int, reports: list[dict[str, Any]]) -> None:
    """Store a batch of metric reports; every validation report reaches the search method.

    A report is known by (trial, run, group, steps_completed), as in Determined: a run reports each
    group once per step count, so a client retrying a batch whose answer it lost stores nothing twice
    and the search method sees each validation once. A later run (after a restart) reports afresh.
    """
    trial = get_trial(conn, trial_id)
    # Experiment, then trial, as in exit_run; a retry racing its original waits for it here.
    exp = experiments.get_experiment(conn, trial.experiment_id, lock=True)
    trial = get_trial(conn, trial_id, lock=True)
    cfg = experiments.experiment_config(exp)
    metric_name, smaller = cfg.searcher.metric, cfg.searcher.smaller_is_better
    summary = dict(trial.summary or {})
    total = trial.total_batches
    best, best_steps = trial.best_validation, trial.best_validation_steps
    validations = []
    rows = []
    seen = _reported(conn, trial_id, trial.run_id, {int(r["steps_completed"]) for r in reports})
    for report in reports:
        group, steps, values = report["group"], int(report["steps_completed"]), report["metrics"]
        if (group, steps) in seen:
            continue
        seen.add((group, steps))
        rows.append(
            {
                "trial_id": trial_id,
                "group": group,
                "steps_completed": steps,
                "metrics": values,
                "report_time": _parse_time(report.get("report_time")),
                "trial_run_id": trial.run_id,
            }
        )
        summary[group] = {"steps_completed": steps, **values}
        if group in ("training", "validation"):
            total = max(total, steps)
        if group == "validation":
            validations.append((steps, values))
            value = values.get(metric_name)
            if _finite(value) and (best is None or (value < best if smaller else value > best)):
                best, best_steps = float(value), steps
    if rows:
        conn.execute(schema.metrics.insert(), rows)
        metric_points.store(conn, trial_id, rows)
    _update(
        conn,
        trial_id,
        summary=summary,
        total_batches=total,
        best_validation=best,
        best_validation_steps=best_steps,
    )
    request_id = trial.request_id
    for steps, values in validations:
        if _finite(values.get(metric_name)):
            conn.execute(
                schema.checkpoints.update()
                .where(
                    schema.checkpoints.c.trial_id == trial_id, schema.checkpoints.c.steps_completed == steps
                )
                .values(validation_metric=float(values[metric_name]))
            )
        search.send(conn, exp.id, functools.partial(_validation_event, request_id, values, steps))


def _reported(conn: Connection, trial_id: int, run_id: int, steps: set[int]) -> set[tuple[str, int]]:
    table = schema.metrics
    rows = conn.execute(
        select(table.c.group, table.c.steps_completed).where(
            table.c.trial_id == trial_id, table.c.trial_run_id == run_id, table.c.steps_completed.in_(steps)
        )
    )
    return {(group, int(steps_completed)) for group, steps_completed in rows}


def _validation_event(request_id: int, values: dict[str, Any], steps: int, method: SearchMethod) -> list:
    return list(method.validation_completed(request_id, values, steps))


def _parse_time(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return now()


def report_progress(conn: Connection, trial_id: int, progress: float) -> None:
    _update(conn, trial_id, progress=max(0.0, min(1.0, float(progress))))


def report_early_exit(conn: Connection, trial_id: int, reason: str) -> None:
    _update(conn, trial_id, early_exit=reason)


class CheckpointConflict(experiments.StateError):
    """A checkpoint UUID is already registered for other files (HTTP 409)."""


def register_checkpoint(conn: Connection, trial_id: int, body: dict[str, Any]) -> Row:
    """Register a checkpoint; registering the same one again (a retry) answers the stored one."""
    trial = get_trial(conn, trial_id)
    exp = experiments.get_experiment(conn, trial.experiment_id)
    get_trial(conn, trial_id, lock=True)
    existing = conn.execute(
        select(schema.checkpoints).where(schema.checkpoints.c.uuid == body["uuid"])
    ).first()
    if existing is not None:
        if existing.trial_id == trial_id and existing.steps_completed == int(body["steps_completed"]):
            return existing
        raise CheckpointConflict(
            f"checkpoint {body['uuid']} is already registered (trial {existing.trial_id}, "
            f"{existing.steps_completed} steps); a new checkpoint needs a new uuid"
        )
    storage = dict(exp.config.get("checkpoint_storage") or {})
    base = storage.get("host_path") or storage.get("container_path") or ""
    if storage.get("storage_path"):
        base = os.path.join(base, storage["storage_path"])
    resources = {str(k): int(v) for k, v in (body.get("resources") or {}).items()}
    steps = int(body["steps_completed"])
    metric = None
    validation = conn.execute(
        select(schema.metrics.c.metrics).where(
            schema.metrics.c.trial_id == trial_id,
            schema.metrics.c.group == "validation",
            schema.metrics.c.steps_completed == steps,
        )
    ).scalar()
    if validation and _finite(validation.get(exp.config["searcher"]["metric"])):
        metric = float(validation[exp.config["searcher"]["metric"]])
    conn.execute(
        schema.checkpoints.insert().values(
            uuid=body["uuid"],
            trial_id=trial_id,
            experiment_id=exp.id,
            steps_completed=steps,
            state="COMPLETED",
            metadata=body.get("metadata") or {},
            resources=resources,
            size=min(sum(resources.values()), MAX_STEPS),
            storage={"type": storage.get("type"), "path": os.path.join(base, body["uuid"])},
            report_time=now(),
            validation_metric=metric,
        )
    )
    _update(conn, trial_id, latest_checkpoint=body["uuid"])
    return get_checkpoint(conn, body["uuid"])


def get_checkpoint(conn: Connection, uuid: str) -> Row:
    row = conn.execute(select(schema.checkpoints).where(schema.checkpoints.c.uuid == uuid)).first()
    if row is None:
        raise NotFound(f"checkpoint {uuid} not found")
    return row


def delete_checkpoint(conn: Connection, trial_id: int, uuid: str) -> None:
    row = get_checkpoint(conn, uuid)
    if row.trial_id != trial_id:
        raise NotFound(f"checkpoint {uuid} does not belong to trial {trial_id}")
    conn.execute(schema.checkpoints.update().where(schema.checkpoints.c.uuid == uuid).values(state="DELETED"))
    trial = get_trial(conn, trial_id)
    if trial.latest_checkpoint == uuid:
        previous = conn.execute(
            select(schema.checkpoints.c.uuid)
            .where(schema.checkpoints.c.trial_id == trial_id, schema.checkpoints.c.state == "COMPLETED")
            .order_by(schema.checkpoints.c.steps_completed.desc())
            .limit(1)
        ).scalar()
        _update(conn, trial_id, latest_checkpoint=previous)


def experiment_best_validation(conn: Connection, trial_id: int) -> float | None:
    trial = get_trial(conn, trial_id)
    exp = experiments.get_experiment(conn, trial.experiment_id)
    smaller = exp.config["searcher"].get("smaller_is_better", True)
    values = [
        v
        for v in conn.execute(
            select(schema.trials.c.best_validation).where(schema.trials.c.experiment_id == exp.id)
        ).scalars()
        if v is not None
    ]
    if not values:
        return None
    return min(values) if smaller else max(values)


def searcher_operation(conn: Connection, trial_id: int) -> dict[str, Any]:
    """Seed-era `searcher.operations()`: how far to train now, in the unit of `searcher.max_length`."""
    trial = get_trial(conn, trial_id)
    exp = experiments.get_experiment(conn, trial.experiment_id)
    length = None
    if exp.searcher_state:
        length = search.method_for(exp).operation_length(trial.request_id)
    if length is None:
        searcher = exp.config["searcher"]
        max_length = searcher.get("max_length") or {}
        if max_length:
            length = next(iter(max_length.values())) if isinstance(max_length, dict) else int(max_length)
        else:  # 0.38 form: the length is max_time, in units of time_metric
            length = searcher.get("max_time") or 0
    return {"length": int(length), "completed": bool(trial.op_completed)}


def searcher_completed(conn: Connection, trial_id: int) -> None:
    _update(conn, trial_id, op_completed=True)


def append_logs(conn: Connection, trial_id: int, lines: list[dict[str, Any]]) -> None:
    if not lines:
        return
    conn.execute(
        schema.trial_logs.insert(),
        [
            {
                "trial_id": trial_id,
                "timestamp": _parse_time(line.get("timestamp")),
                "container_id": line.get("container_id"),
                "rank": line.get("rank"),
                "level": line.get("level") or "INFO",
                "stdtype": line.get("stdtype") or "stdout",
                "message": str(line.get("message", "")),
            }
            for line in lines
        ],
    )


def read_logs(
    conn: Connection,
    trial_id: int,
    *,
    after: int | None,
    limit: int | None,
    tail: int | None,
    where: Sequence[ColumnElement[bool]] = (),
) -> list[Row]:
    table = schema.trial_logs
    query = select(table).where(table.c.trial_id == trial_id, *where)
    if after is not None:
        query = query.where(table.c.id > after)
    if tail is not None:
        rows = conn.execute(query.order_by(table.c.id.desc()).limit(tail)).all()
        return list(reversed(rows))
    query = query.order_by(table.c.id)
    if limit is not None:
        query = query.limit(limit)
    return list(conn.execute(query).all())
