"""What training code reports about its trial: metrics, progress, early exits, checkpoints and the
searcher operation it works on (its logs are in master/trial_logs.py)."""

from __future__ import annotations

import functools
import math
import os
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow.api.models import MAX_STEPS
from det_airflow.errors import DetError
from det_airflow.master import (
    experiments,
    file_cleanup,
    lifecycle,
    metric_points,
    models_registry,
    schema,
    search,
    trials,
    webhook_events,
)
from det_airflow.master.lifecycle import NotFound, now
from det_airflow.master.trial_logs import reported_time
from det_airflow.searcher import SearchMethod


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def report_metrics(conn: Connection, trial_id: int, reports: list[dict[str, Any]]) -> None:
    """Store a batch of metric reports; every validation report reaches the search method.

    A report is known by (trial, run, group, steps_completed), as in Determined: a run reports each
    group once per step count, so a client retrying a batch whose answer it lost stores nothing twice
    and the search method sees each validation once. A later run (after a restart) reports afresh.
    """
    trial = trials.get_trial(conn, trial_id)
    # Experiment, then trial, as in exit_run; a retry racing its original waits for it here.
    exp = experiments.get_experiment(conn, trial.experiment_id, lock=True)
    trial = trials.mark_running(
        conn, trials.get_trial(conn, trial_id, lock=True), "its process reported metrics"
    )
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
                "report_time": reported_time(report.get("report_time")),
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
    trials.update_trial(
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
    if rows:
        reported = [(r["group"], r["steps_completed"], r["metrics"]) for r in rows]
        webhook_events.metrics_reported(conn, exp.id, trial_id, reported)


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


def report_progress(conn: Connection, trial_id: int, progress: float) -> None:
    trials.update_trial(conn, trial_id, progress=max(0.0, min(1.0, float(progress))))


def report_early_exit(conn: Connection, trial_id: int, reason: str) -> None:
    trials.update_trial(conn, trial_id, early_exit=reason)


class CheckpointConflict(lifecycle.StateError):
    """A checkpoint UUID is already registered for other files (HTTP 409)."""


class CheckpointUUIDError(DetError):
    """A checkpoint registration whose uuid is not a canonical UUID (HTTP 400)."""


def check_checkpoint_uuid(value: str) -> str:
    """``value`` if it is a canonical UUID (``str(uuid.UUID(value)) == value``): the name of the
    checkpoint's folder, which GC and deletes remove, so never a name a trial picked (``etc``)."""
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        canonical = None
    if canonical != value:
        raise CheckpointUUIDError(
            f"uuid: expected a lowercase UUID such as {uuid.uuid4()} (the Core API makes one), got {value!r}"
        )
    return value


def register_checkpoint(conn: Connection, trial_id: int, body: dict[str, Any]) -> Row:
    """Register a checkpoint; registering the same one again (a retry) answers the stored one.

    Its files are where the experiment's own storage puts that uuid: the trial names no path."""
    check_checkpoint_uuid(body["uuid"])
    trial = trials.get_trial(conn, trial_id)
    exp = experiments.get_experiment(conn, trial.experiment_id)
    trials.mark_running(conn, trials.get_trial(conn, trial_id, lock=True), "its process saved a checkpoint")
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
    folder = file_cleanup.checkpoint_folder(storage, body["uuid"])
    if folder is None:  # storage whose files are not on this machine (a container's path)
        base = storage.get("host_path") or storage.get("container_path") or ""
        if storage.get("storage_path"):
            base = os.path.join(base, storage["storage_path"])
        folder = Path(os.path.normpath(os.path.join(base, body["uuid"])))
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
            storage=_recorded_storage(storage, body["uuid"], folder),
            report_time=now(),
            validation_metric=metric,
        )
    )
    lifecycle.checkpoint_created(conn, body["uuid"], f"trial {trial_id} saved it at {steps} steps")
    trials.update_trial(conn, trial_id, latest_checkpoint=body["uuid"])
    return get_checkpoint(conn, body["uuid"])


def _recorded_storage(storage: dict[str, Any], uuid: str, folder: Path) -> dict[str, Any]:
    """Where a checkpoint's files are, as its record keeps it: derived from the experiment's own
    storage, never from what the trial says. An object store's record names no credentials."""
    from det_airflow.object_storage import is_object_storage

    if is_object_storage(storage):
        from det_airflow.core._storage import CheckpointStorage

        bucket = CheckpointStorage.from_config(storage)
        return {**bucket.describe(uuid), "path": bucket.location(uuid)}
    return {"type": storage.get("type"), "path": str(folder)}


def get_checkpoint(conn: Connection, uuid: str) -> Row:
    row = conn.execute(select(schema.checkpoints).where(schema.checkpoints.c.uuid == uuid)).first()
    if row is None:
        raise NotFound(f"checkpoint {uuid} not found")
    return row


def delete_checkpoint(conn: Connection, trial_id: int, uuid: str) -> None:
    row = get_checkpoint(conn, uuid)
    if row.trial_id != trial_id:
        raise NotFound(f"checkpoint {uuid} does not belong to trial {trial_id}")
    if row.state == "DELETED":
        return
    models_registry.check_not_registered(conn, uuid)
    lifecycle.delete_checkpoint(conn, row, "det checkpoint delete")
    trial = trials.get_trial(conn, trial_id)
    if trial.latest_checkpoint == uuid:
        previous = conn.execute(
            select(schema.checkpoints.c.uuid)
            .where(schema.checkpoints.c.trial_id == trial_id, schema.checkpoints.c.state == "COMPLETED")
            .order_by(schema.checkpoints.c.steps_completed.desc())
            .limit(1)
        ).scalar()
        trials.update_trial(conn, trial_id, latest_checkpoint=previous)


def experiment_best_validation(conn: Connection, trial_id: int) -> float | None:
    trial = trials.get_trial(conn, trial_id)
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
    trial = trials.get_trial(conn, trial_id)
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
    trials.update_trial(conn, trial_id, op_completed=True)
