"""Routes for people (CLI and UI): an Airflow login, and Airflow's auth manager decides (authz.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import StreamingResponse
from sqlalchemy import ColumnElement, Connection, Row, func, select

from det_airflow import object_storage
from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import (
    MAX_LABELS,
    CheckpointAnswer,
    CheckpointList,
    ConfigAnswer,
    CreatedExperiment,
    CreateExperiment,
    Deleted,
    Empty,
    ExperimentAnswer,
    ExperimentDetail,
    ExperimentList,
    ExperimentPatch,
    HparamImportance,
    LabelBody,
    LogsPage,
    Me,
    MetricsList,
    StateChanges,
    TrialAnswer,
    TrialList,
)
from det_airflow.errors import DetError
from det_airflow.master import (
    caps,
    experiment_deletion,
    experiment_state,
    experiments,
    file_cleanup,
    housekeeping,
    importance,
    lifecycle,
    projects,
    removals,
    reports,
    schema,
    serialize,
    submission,
    templates,
    trials,
)
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import (
    Caller,
    CallerDep,
    PermissionDenied,
    check_change,
    check_create,
    check_pool,
    check_read,
    readable,
)
from det_airflow.master.db import get_database
from det_airflow.master.trial_logs import SOURCES, read_logs, time_window
from det_airflow.states import LOG_LEVELS, TrialState

# Every route needs an Airflow login (the master runs inside Airflow's API server), and no change
# may come from another site's page riding on the login cookie.
router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])

# The answer of the context routes: the tar.gz the experiment was created with.
CONTEXT_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the context tar.gz",
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def _experiment_answer(conn: Connection, row: Row) -> dict:
    return {"experiment": projects.experiment_answer(conn, row)}


def _config_for(caller: Caller, row: Row) -> dict[str, Any]:
    return row.config if caller.sees_secrets_of(row) else serialize.masked_config(row.config)


def _readable_trial(conn: Connection, caller: Caller, trial_id: int, what: str) -> Row:
    trial = trials.get_trial(conn, trial_id)
    check_read(caller, experiments.get_experiment(conn, trial.experiment_id), what)
    return trial


@router.post("/experiments", response_model=CreatedExperiment)
def create_experiment(body: CreateExperiment, caller: CallerDep) -> dict:
    check_create(caller)
    db = get_database()
    # Each create in flight holds its context and config in memory and checks them: capped per user.
    with caps.creates.hold(caller.name):
        config_yaml = body.config
        if body.template is not None:
            with db.read() as conn:
                config_yaml = templates.apply(conn, caller, body.template, body.config)
        with db.read() as conn:  # a config may name a project: only one the caller may file into
            if body.project_id is not None:
                config_yaml = _placed_in_project(conn, caller, config_yaml, body.project_id)
            projects.check_config_placement(conn, caller, config_yaml)
        row, created = submission.create_once(
            db,
            config_yaml=config_yaml,
            context=body.context,
            owner=caller.name,
            paused=body.paused,
            parent_id=body.parent_id,
            request_id=body.request_id,
            check_source=lambda source: check_read(caller, source, "warm-start from"),
            check_pool=lambda pool: check_pool(caller, pool),
            first_trials=trials.place_first_trials,
        )
    # Fields accepted but not acted on: one line the CLI prints, never silently dropped.
    warnings = list(experiments.experiment_config(row).warnings)
    if created:
        trials.make_room_for_submitted(db, row.id, row.resource_pool)
    with db.read() as conn:
        return {**_experiment_answer(conn, row), "warnings": warnings}


@router.get("/experiments", response_model=ExperimentList)
def list_experiments(caller: CallerDep, all: bool = False) -> dict:  # noqa: A002 - the CLI's flag name
    table = schema.experiments
    # Tasks (notebooks, TensorBoards, ...) run as experiments of their own: `det task list` shows them.
    query = select(table).where(experiments.not_a_task()).order_by(table.c.id)
    if not all:
        query = query.where(table.c.archived.is_(False))
    with get_database().read() as conn:
        rows = readable(caller, conn.execute(query).all())
        best = _best_validations(conn, [r.id for r in rows])
        best_of = {r.id: _best_of(r, best.get(r.id)) for r in rows}
        return {"experiments": projects.experiment_answers(conn, rows, best_validation=best_of)}


def _best_validations(
    conn: Connection, experiment_ids: list[int]
) -> dict[int, tuple[float | None, float | None]]:
    """Each listed experiment's lowest and highest best searcher metric of its trials, in one query."""
    trials_table = schema.trials
    query = (
        select(
            trials_table.c.experiment_id,
            func.min(trials_table.c.best_validation),
            func.max(trials_table.c.best_validation),
        )
        .where(trials_table.c.experiment_id.in_(experiment_ids))
        .group_by(trials_table.c.experiment_id)
    )
    return {experiment_id: (low, high) for experiment_id, low, high in conn.execute(query)}


def _best_of(row: Row, extremes: tuple[float | None, float | None] | None) -> float | None:
    if extremes is None:
        return None
    smaller_is_better = (row.config.get("searcher") or {}).get("smaller_is_better", True)
    return extremes[0] if smaller_is_better else extremes[1]


def _trials_of(conn: Connection, experiment_id: int, caller: Caller, row: Row) -> list[dict]:
    rows = conn.execute(
        select(schema.trials)
        .where(schema.trials.c.experiment_id == experiment_id)
        .order_by(schema.trials.c.id)
    ).all()
    masked = not caller.sees_secrets_of(row)
    return [serialize.trial(r, masked=masked) for r in rows]


@router.get("/experiments/{experiment_id}", response_model=ExperimentDetail)
def describe_experiment(experiment_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
        check_read(caller, row, "describe")
        trial_list = _trials_of(conn, experiment_id, caller, row)
        placement = projects.placement(conn, row)
    return {
        "experiment": serialize.experiment(row, num_trials=len(trial_list), placement=placement),
        "trials": trial_list,
        "config": _config_for(caller, row),
    }


@router.get("/experiments/{experiment_id}/config", response_model=ConfigAnswer)
def experiment_config(experiment_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
    check_read(caller, row, "read the config of")
    return {"config": _config_for(caller, row)}


@router.get("/experiments/{experiment_id}/hyperparameter-importance", response_model=HparamImportance)
def hyperparameter_importance(
    experiment_id: int,
    caller: CallerDep,
    metric: Annotated[str | None, Query(description="default: the searcher's metric")] = None,
    evaluator: Annotated[Literal["fanova", "ped_anova"] | None, Query()] = None,
) -> dict:
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
        check_read(caller, row, "read the hyperparameter importance of")
        found = importance.experiment_importance(conn, row, metric, evaluator=evaluator)
    return {
        "metric": found.metric,
        "evaluator": found.evaluator,
        "trials": found.trials,
        "importances": [{"name": name, "importance": value} for name, value in found.importances],
        "constants": found.constants,
        "note": found.note,
    }


def _placed_in_project(conn: Connection, caller: Caller, config_yaml: str, project_id: int) -> str:
    """The config with the workspace and project of ``project_id`` (Determined's ``projectId``), once
    the caller may file into it: the same rights and checks as ``det e move``. A config that names
    another project is refused rather than silently moved."""
    import yaml

    from det_airflow.config import read_yaml

    project = projects.get_project(conn, project_id)
    workspace = projects.get_workspace(conn, project.workspace_id)
    where = f"project '{project.name}' of workspace '{workspace.name}'"
    projects.check_may_file_into(conn, caller, project, f"create experiments in {where}")
    if project.archived or workspace.archived:
        archived = where if project.archived else f"workspace '{workspace.name}'"
        raise projects.ProjectError(f"{archived} is archived: experiments cannot be created in it")
    raw = read_yaml(config_yaml, source_name="config")
    if not isinstance(raw, dict):
        return config_yaml  # the config's own checks say what is wrong
    named = (raw.get("workspace"), raw.get("project"))
    if named == (workspace.name, project.name):
        return config_yaml
    if named != (None, None):
        raise projects.ProjectError(
            f"the config names project '{named[1]}' of workspace '{named[0]}', but project_id "
            f"{project_id} is {where}: give one of them"
        )
    return yaml.safe_dump({**raw, "workspace": workspace.name, "project": project.name}, sort_keys=False)


@router.get("/experiments/{experiment_id}/trials", response_model=TrialList)
def experiment_trials(experiment_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
        check_read(caller, row, "list the trials of")
        return {"trials": _trials_of(conn, experiment_id, caller, row)}


@router.get("/experiments/{experiment_id}/checkpoints", response_model=CheckpointList)
def experiment_checkpoints(experiment_id: int, caller: CallerDep) -> dict:
    table = schema.checkpoints
    with get_database().read() as conn:
        check_read(caller, experiments.get_experiment(conn, experiment_id), "list the checkpoints of")
        rows = conn.execute(
            select(table)
            .where(table.c.experiment_id == experiment_id)
            .order_by(table.c.trial_id, table.c.steps_completed)
        ).all()
    return {"checkpoints": [serialize.checkpoint(r) for r in rows]}


@router.get("/experiments/{experiment_id}/state-changes", response_model=StateChanges)
def experiment_state_changes(experiment_id: int, caller: CallerDep) -> dict:
    """Every state the experiment took, oldest first, with its time and reason."""
    with get_database().read() as conn:
        check_read(caller, experiments.get_experiment(conn, experiment_id), "read the state changes of")
        return {"state_changes": lifecycle.history(conn, "experiment", experiment_id)}


def experiment_context(experiment_id: int) -> Response:
    """The context tar.gz; det tasks reach it through the internal route with the service token."""
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
    return Response(row.context or b"", media_type="application/gzip")


@router.get("/experiments/{experiment_id}/context", response_class=Response, responses=CONTEXT_ANSWER)
def people_experiment_context(experiment_id: int, caller: CallerDep) -> Response:
    """The context's files for its owner or an admin: they may hold secrets (the CLI packs the
    config's own folder), which readers of the experiment do not see."""
    with get_database().read() as conn:
        row = experiments.get_experiment(conn, experiment_id)
    check_read(caller, row, "download the context of")
    if not caller.sees_secrets_of(row):
        raise PermissionDenied(
            f"user '{caller.name}' may not download the context of experiment {experiment_id}: "
            f"its files may hold secrets; only its owner '{row.owner}' or an admin may"
        )
    return experiment_context(experiment_id)


# Registered before the `/{action}` route below, which would otherwise take `labels` for an action.
@router.post("/experiments/{experiment_id}/labels", response_model=ExperimentAnswer)
def add_label(experiment_id: int, body: LabelBody, caller: CallerDep) -> dict:
    table = schema.experiments
    with get_database().begin() as conn:
        row = experiments.get_experiment(conn, experiment_id, lock=True)
        check_change(caller, row, "label")
        labels = list(row.labels or [])
        if body.label not in labels:
            if len(labels) >= MAX_LABELS:
                raise DetError(
                    f"experiment {experiment_id} already has {MAX_LABELS} labels, the most allowed"
                )
            labels.append(body.label)
            conn.execute(table.update().where(table.c.id == experiment_id).values(labels=labels))
        return _experiment_answer(conn, experiments.get_experiment(conn, experiment_id))


@router.delete("/experiments/{experiment_id}/labels/{label:path}", response_model=ExperimentAnswer)
def remove_label(experiment_id: int, label: str, caller: CallerDep) -> dict:
    table = schema.experiments
    with get_database().begin() as conn:
        row = experiments.get_experiment(conn, experiment_id, lock=True)
        check_change(caller, row, "unlabel")
        labels = list(row.labels or [])
        if label in labels:
            labels.remove(label)
            conn.execute(table.update().where(table.c.id == experiment_id).values(labels=labels))
        return _experiment_answer(conn, experiments.get_experiment(conn, experiment_id))


@router.patch("/experiments/{experiment_id}", response_model=ExperimentAnswer)
def patch_experiment(experiment_id: int, body: ExperimentPatch, caller: CallerDep) -> dict:
    values = body.model_dump(exclude_none=True)
    if not values:
        raise DetError("nothing to change: give 'name', 'description' or 'notes'")
    table = schema.experiments
    with get_database().begin() as conn:
        row = experiments.get_experiment(conn, experiment_id, lock=True)
        check_change(caller, row, "edit")
        conn.execute(table.update().where(table.c.id == experiment_id).values(**values))
        return _experiment_answer(conn, experiments.get_experiment(conn, experiment_id))


@router.post("/experiments/{experiment_id}/{action}", response_model=ExperimentAnswer)
def change_experiment(experiment_id: int, action: str, caller: CallerDep) -> dict:
    if action not in ("pause", "activate", "cancel", "kill", "archive", "unarchive"):
        raise experiments.NotFound(f"unknown experiment action '{action}'")
    with get_database().begin() as conn:
        check_change(caller, experiments.get_experiment(conn, experiment_id), action)
        experiment_state.change_state(conn, experiment_id, action)
        answer = _experiment_answer(conn, experiments.get_experiment(conn, experiment_id))
    if action == "activate":
        trials.start_resumed_slots(get_database(), experiment_id)  # once the activation is committed
    elif action in ("cancel", "kill"):
        # Its slots deferred for a trial end now, not when their triggers look.
        housekeeping.run_soon(housekeeping.END_SLOTS_LEFT_WAITING, *housekeeping.END_SLOTS_LOOKS)
    return answer


@router.delete("/experiments/{experiment_id}", response_model=Deleted)
def delete_experiment(experiment_id: int, caller: CallerDep) -> dict:
    db = get_database()
    with db.read() as conn:
        check_change(caller, experiments.get_experiment(conn, experiment_id), "delete")
    not_removed, removing = experiment_deletion.delete_experiment(db, experiment_id)
    housekeeping.run_soon(housekeeping.REMOVE_FILES)
    return {"not_removed": not_removed, "removing": removing}


@router.get("/trials/{trial_id}", response_model=TrialAnswer)
def describe_trial(trial_id: int, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        trial = _readable_trial(conn, caller, trial_id, "describe a trial of")
        masked = not caller.sees_secrets_of(experiments.get_experiment(conn, trial.experiment_id))
    return {"trial": serialize.trial(trial, masked=masked)}


@router.get("/trials/{trial_id}/state-changes", response_model=StateChanges)
def trial_state_changes(trial_id: int, caller: CallerDep) -> dict:
    """Every state the trial took (each run it started and why it ended), oldest first."""
    with get_database().read() as conn:
        _readable_trial(conn, caller, trial_id, "read the state changes of")
        return {"state_changes": lifecycle.history(conn, "trial", trial_id)}


@router.post("/trials/{trial_id}/kill", response_model=TrialAnswer)
def kill_trial(trial_id: int, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        trial = trials.get_trial(conn, trial_id)
        check_change(
            caller, experiments.get_experiment(conn, trial.experiment_id), f"kill trial {trial_id} of"
        )
        return {"trial": serialize.trial(trials.kill_trial(conn, trial_id))}


@router.get("/trials/{trial_id}/metrics", response_model=MetricsList)
def trial_metrics(trial_id: int, caller: CallerDep, group: str | None = None) -> dict:
    table = schema.metrics
    query = select(table).where(table.c.trial_id == trial_id)
    if group:
        query = query.where(table.c.group == group)
    with get_database().read() as conn:
        _readable_trial(conn, caller, trial_id, "read the metrics of")
        rows = conn.execute(query.order_by(table.c.steps_completed, table.c.id)).all()
    return {"metrics": [serialize.metrics(r) for r in rows]}


@router.get("/trials/{trial_id}/logs", response_model=LogsPage)
def trial_logs(
    trial_id: int,
    caller: CallerDep,
    after: int | None = None,
    limit: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
    rank: Annotated[list[int] | None, Query()] = None,
    level: Annotated[Literal[LOG_LEVELS] | None, Query()] = None,  # type: ignore[valid-type]
    search: Annotated[str | None, Query(min_length=1, max_length=1000)] = None,
    timestamp_before: datetime | None = None,
    timestamp_after: datetime | None = None,
    container_id: Annotated[list[Annotated[str, Query(max_length=64)]] | None, Query()] = None,
    source: Annotated[list[Literal[SOURCES]] | None, Query()] = None,  # type: ignore[valid-type]
    stdtype: Annotated[list[Annotated[str, Query(max_length=16)]] | None, Query()] = None,
) -> dict:
    """Lines after ``after`` (the id of the last line seen, for tailing), filtered like `det trial logs`:
    of these ranks, containers, sources ("task", "master") and output streams (stdout, stderr), of
    ``level`` or higher, containing ``search`` (any case), logged before ``timestamp_before`` and
    after ``timestamp_after`` (RFC 3339; no zone: UTC)."""
    table = schema.trial_logs
    where: list[ColumnElement[bool]] = time_window(timestamp_before, timestamp_after)
    if rank:
        where.append(table.c.rank.in_(rank))
    if container_id:
        where.append(table.c.container_id.in_(container_id))
    if source:
        where.append(table.c.source.in_(source))
    if stdtype:
        where.append(table.c.stdtype.in_(stdtype))
    if level is not None:
        names = LOG_LEVELS[LOG_LEVELS.index(level) :]
        where.append(func.upper(table.c.level).in_([*names, *(f"LOG_LEVEL_{n}" for n in names)]))
    if search is not None:
        where.append(table.c.message.icontains(search, autoescape=True))
    with get_database().read() as conn:
        trial = _readable_trial(conn, caller, trial_id, "read the logs of")
        rows = read_logs(conn, trial_id, after=after, limit=limit, tail=tail, where=where)
    return {"logs": [serialize.log_line(r) for r in rows], "trial_state": trial.state}


@router.get("/checkpoints/{uuid}", response_model=CheckpointAnswer)
def describe_checkpoint(uuid: str, caller: CallerDep) -> dict:
    with get_database().read() as conn:
        row = reports.get_checkpoint(conn, uuid)
        check_read(caller, experiments.get_experiment(conn, row.experiment_id), "read a checkpoint of")
    return {"checkpoint": serialize.checkpoint(row)}


@router.delete("/checkpoints/{uuid}", response_model=Empty)
def delete_checkpoint(uuid: str, caller: CallerDep) -> dict:
    with get_database().begin() as conn:
        row = reports.get_checkpoint(conn, uuid)
        exp = experiments.get_experiment(conn, row.experiment_id, lock=True)
        check_change(caller, exp, f"delete checkpoint {uuid} of")
        if row.state == "DELETED":
            return {}
        trial = trials.get_trial(conn, row.trial_id)
        if trial.latest_checkpoint == uuid and not TrialState(trial.state).is_terminal:
            raise lifecycle.StateError(
                f"checkpoint {uuid} is the latest of trial {trial.id}, which is {trial.state} "
                "and would resume from it; delete it once the trial has ended"
            )
        uuids, refused = file_cleanup.refused_checkpoints(exp, [(uuid, row.storage)])
        if refused:
            raise DetError(f"cannot remove the files of {refused[0]}")
        reports.delete_checkpoint(conn, row.trial_id, uuid)
        # With the row: the files go once a host has removed them (master/removals.py).
        removals.queue_checkpoints(conn, exp, uuids)
    housekeeping.run_soon(housekeeping.REMOVE_FILES)
    return {}


# The answer of the checkpoint file route: the file's bytes, streamed.
CHECKPOINT_FILE_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "one file of the checkpoint",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get(
    "/checkpoints/{uuid}/files/{path:path}",
    response_class=StreamingResponse,
    responses=CHECKPOINT_FILE_ANSWER,
)
def checkpoint_file(uuid: str, path: str, caller: CallerDep) -> StreamingResponse:
    """One file of a checkpoint in object storage, for anyone who may read its experiment: the
    master holds the bucket's credentials, the reader needs none (`det checkpoint download`).
    Only the files the checkpoint registered are served."""
    with get_database().read() as conn:
        row = reports.get_checkpoint(conn, uuid)
        exp = experiments.get_experiment(conn, row.experiment_id)
        check_read(caller, exp, "download a checkpoint of")
    if row.state == "DELETED":
        raise lifecycle.NotFound(f"checkpoint {uuid} was deleted; its files are gone")
    size = (row.resources or {}).get(path)
    if size is None:
        raise lifecycle.NotFound(f"checkpoint {uuid} has no file {path!r}")
    storage_config = exp.config.get("checkpoint_storage") or {}
    if not object_storage.is_object_storage(storage_config):
        raise DetError(
            f"checkpoint {uuid} is in {storage_config.get('type')} storage: its files are read where "
            "that folder is mounted, not through the master"
        )
    body = object_storage.open_storage(storage_config).open_file(uuid, path)
    return StreamingResponse(
        _chunks(body),
        media_type="application/octet-stream",
        headers={"Content-Length": str(size)},
    )


def _chunks(body: Any, size: int = 1 << 20) -> Iterator[bytes]:
    try:
        while chunk := body.read(size):
            yield chunk
    finally:
        body.close()


@router.get("/me", response_model=Me)
def whoami(caller: CallerDep) -> dict:
    return {"username": caller.name, "admin": caller.is_admin}
