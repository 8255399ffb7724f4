"""Routes for det's own Airflow tasks: the service token of the `det_default` connection."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Response
from sqlalchemy.exc import SQLAlchemyError

from det_airflow.api.models import (
    Empty,
    Finalized,
    HostBeat,
    HostId,
    HostReport,
    LogBatch,
    NodeExit,
    Registered,
    RegisterRun,
    RemovalDone,
    Removals,
    SearcherStatus,
    SlotAnswer,
    TaskRef,
    TrialAnswer,
    TrialExit,
    TrialExitAnswer,
    TrialPhase,
    TrialStatus,
)
from det_airflow.errors import DetError
from det_airflow.master import (
    checkpoint_gc,
    experiments,
    gangs,
    hosts,
    housekeeping,
    projects,
    removals,
    routes_people,
    search,
    serialize,
    submission,
    trials,
)
from det_airflow.master.airflow_bridge import NODE_TASK
from det_airflow.master.auth import ServiceAuth
from det_airflow.master.db import get_database
from det_airflow.master.trial_logs import append_logs
from det_airflow.states import ExperimentState, TrialState

router = APIRouter(prefix="/internal", dependencies=[ServiceAuth])
WAITING_SLOTS = "start waiting slots"


@router.post("/experiments/register", response_model=Registered)
def register(body: RegisterRun) -> dict:
    with get_database().begin() as conn:
        row = submission.register_run(
            conn,
            dag_id=body.dag_id,
            run_id=body.run_id,
            experiment_id=body.experiment_id,
            config_yaml=body.config,
            context=submission.decode_context(body.context),  # its size and members checked
            owner=body.owner or "airflow",
        )
    return {"experiment_id": row.id, "state": row.state}


@router.get("/experiments/{experiment_id}/searcher", response_model=SearcherStatus)
def searcher_status(experiment_id: int) -> dict:
    with get_database().begin() as conn:
        row = experiments.get_experiment(conn, experiment_id, lock=True)
        cfg = experiments.experiment_config(row)
        state = ExperimentState(row.state)
        if state == ExperimentState.ACTIVE:
            search.start(conn, row)
            row = experiments.get_experiment(conn, experiment_id)
        ready = ExperimentState(row.state) != ExperimentState.PAUSED
        return {"ready": ready, "state": row.state, "slots": submission.trial_slots(cfg)}


# Seconds after a slot is told to move when the master looks whether its task has deferred yet.
_MOVE_LOOKS = (0.3, 0.6, 1.0, 1.5)


# Only the fields of the answer's status are sent (SlotAnswer).
@router.post(
    "/experiments/{experiment_id}/slots/{slot}/acquire",
    response_model=SlotAnswer,
    response_model_exclude_unset=True,
)
def acquire(experiment_id: int, slot: int, body: TaskRef, dry_run: bool = False) -> dict:
    with get_database().begin() as conn:
        answer = trials.acquire(conn, experiment_id, slot, body.model_dump(), dry_run=dry_run)
    queue = answer.pop("queue", None)
    if queue is not None and not dry_run and body.dag_id and body.run_id and body.map_index is not None:
        trials.route_slot(body.dag_id, body.run_id, body.map_index, queue)
        # The task defers once told; its new try on the trial's host starts as soon as it has.
        housekeeping.run_soon(housekeeping.START_PLACED_SLOTS, *_MOVE_LOOKS)
    if "trial" in answer:
        if body.host is not None and body.dag_id and body.run_id and body.map_index is not None:
            trials.unroute_slot(body.dag_id, body.run_id, body.map_index)
        if answer.get("spec", {}).get("gang"):
            # A multi-node run: its other nodes' tasks start now, each on its host.
            trials.start_nodes(get_database(), answer["trial"].id)
        answer["trial"] = serialize.trial(answer["trial"])
    return answer


@router.post(
    "/experiments/{experiment_id}/slots/{slot}/nodes/{rank}/acquire",
    response_model=SlotAnswer,
    response_model_exclude_unset=True,
)
def acquire_node(experiment_id: int, slot: int, rank: int, body: TaskRef, dry_run: bool = False) -> dict:
    """A node task asks for its part of its slot's multi-node run (master/gangs.py)."""
    with get_database().begin() as conn:
        answer = trials.acquire_node(conn, experiment_id, slot, rank, body.model_dump(), dry_run=dry_run)
    queue = answer.pop("queue", None)
    if queue is not None and not dry_run and body.dag_id and body.run_id and body.map_index is not None:
        trials.route_slot(body.dag_id, body.run_id, body.map_index, queue, task_id=NODE_TASK)
    if "trial" in answer:
        if body.host is not None and body.dag_id and body.run_id and body.map_index is not None:
            trials.unroute_slot(body.dag_id, body.run_id, body.map_index, task_id=NODE_TASK)
        answer["trial"] = serialize.trial(answer["trial"])
    return answer


@router.post("/trials/{trial_id}/nodes/{rank}/exit", response_model=Empty)
def node_exit(trial_id: int, rank: int, body: NodeExit) -> dict:
    """A node of a multi-node run ended; a failure stops the others (the chief's task looks)."""
    with get_database().begin() as conn:
        gangs.exit_node(conn, trial_id, rank, body.run_id, body.exit_code)
    return {}


@router.post("/trials/{trial_id}/exit", response_model=TrialExitAnswer)
def trial_exit(trial_id: int, body: TrialExit) -> dict:
    with get_database().begin() as conn:
        trial, retry = trials.exit_run(conn, trial_id, body.exit_code)
        trials.give_slot_its_next_trial(conn, trial)
        search_done = experiments.get_experiment(conn, trial.experiment_id).search_done
    housekeeping.run_soon(WAITING_SLOTS)  # the slots it held may start a waiting trial at once
    if TrialState(trial.state).is_terminal:
        _collect_checkpoints(trial.experiment_id)
        if search_done:  # its search's last trial: the slots deferred for more end
            housekeeping.run_soon(housekeeping.END_SLOTS_LEFT_WAITING, *housekeeping.END_SLOTS_LOOKS)
    return {"trial": serialize.trial(trial), "retry": retry}


@router.post("/trials/{trial_id}/phase", response_model=TrialAnswer)
def trial_phase(trial_id: int, body: TrialPhase) -> dict:
    with get_database().begin() as conn:
        trial = trials.report_phase(conn, trial_id, body.run_id, TrialState(body.state), body.reason)
    return {"trial": serialize.trial(trial)}


def _collect_checkpoints(experiment_id: int) -> None:
    """Best effort, after the trial's end is committed: a failure is logged, the exit stands."""
    try:
        for problem in checkpoint_gc.collect(get_database(), experiment_id):
            logging.getLogger(__name__).warning("checkpoint garbage collection: %s", problem)
        housekeeping.run_soon(housekeeping.REMOVE_FILES)  # what it queued, where no host reports
    except (DetError, SQLAlchemyError):
        logging.getLogger(__name__).exception("checkpoint garbage collection of experiment %s", experiment_id)


@router.get("/trials/{trial_id}", response_model=TrialStatus)
def trial_status(trial_id: int) -> dict:
    with get_database().read() as conn:
        trial = trials.get_trial(conn, trial_id)
        exp = experiments.get_experiment(conn, trial.experiment_id)
        failed = gangs.failure(conn, trial)
    return {
        "trial": serialize.trial(trial),
        "experiment_state": exp.state,
        "run_id": trial.run_id,
        "gang_failed": failed,
    }


@router.post("/trials/{trial_id}/logs", response_model=Empty)
def trial_logs(trial_id: int, body: LogBatch) -> dict:
    with get_database().begin() as conn:
        trials.get_trial(conn, trial_id)
        append_logs(conn, trial_id, [line.model_dump() for line in body.logs], source="task")
    return {}


@router.post("/experiments/{experiment_id}/finalize", response_model=Finalized)
def finalize(experiment_id: int) -> dict:
    with get_database().begin() as conn:
        row, best = experiments.finalize(conn, experiment_id)
        experiment = projects.experiment_answer(conn, row)
    _collect_checkpoints(experiment_id)  # trials closed without an exit of their own
    return {"experiment": experiment, "best_checkpoint": best}


@router.put("/hosts/{host_id}", response_model=HostBeat)
def report_host(host_id: Annotated[HostId, Path()], body: HostReport) -> dict:
    """A worker host's heartbeat: its slots count for placement until ``[det] host_timeout``
    seconds pass without one. The answer says how many file removals wait for it."""
    with get_database().begin() as conn:
        hosts.report(conn, host_id, body.model_dump())
        (answer,) = hosts.describe(conn, host_id)
        waiting = removals.waiting_for(conn, host_id)
    return {**answer, "removals_waiting": waiting}


@router.post("/hosts/{host_id}/removals/claim", response_model=Removals)
def claim_removals(host_id: Annotated[HostId, Path()]) -> dict:
    """File removals for this host to carry out: those of shared storage and of its own folders."""
    with get_database().begin() as conn:
        rows = removals.claim(conn, host_id)
    return {"removals": [removals.as_removal(row) for row in rows]}


@router.post("/hosts/{host_id}/removals/{removal_id}/done", response_model=Empty)
def finish_removal(host_id: Annotated[HostId, Path()], removal_id: int, body: RemovalDone) -> dict:
    with get_database().begin() as conn:
        removals.finish(conn, removal_id, body.not_removed, host_id=host_id)
    return {}


@router.delete("/hosts/{host_id}", response_model=Empty)
def leave_host(host_id: Annotated[HostId, Path()]) -> dict:
    """The host's worker shut down: its slots stop counting at once."""
    with get_database().begin() as conn:
        hosts.leave(conn, host_id)
    return {}


# The context tar.gz, for trial tasks: the same answer people get.
router.add_api_route(
    "/experiments/{experiment_id}/context",
    routes_people.experiment_context,
    methods=["GET"],
    response_class=Response,
    responses=routes_people.CONTEXT_ANSWER,
)
