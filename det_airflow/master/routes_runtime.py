"""Routes for one trial's training code: the trial token of its current run."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import APIRouter, HTTPException, Query, Response

from det_airflow.api.models import (
    BestValidationAnswer,
    CheckpointAnswer,
    CheckpointIn,
    EarlyExit,
    Empty,
    MetricBatch,
    Preemption,
    Progress,
    SearcherCompleted,
    SearcherOperation,
)
from det_airflow.master import caps, experiments, reports, routes_people, serialize, trials
from det_airflow.master.auth import AnyTrialAuth, TrialAuth
from det_airflow.master.db import Database, get_database

router = APIRouter(prefix="/runtime")
T = TypeVar("T")


@router.post("/trials/{trial_id}/metrics", response_model=Empty)
def report_metrics(trial_id: TrialAuth, body: MetricBatch) -> dict:
    with get_database().begin() as conn:
        reports.report_metrics(conn, trial_id, [r.model_dump() for r in body.reports])
    return {}


# How often a long poll of the preemption route looks again (one read per look), how long one may
# last, and how many one trial may hold open at once in this API server process (trial code holds
# the token: without a bound, each poll it opens would cost the master four reads a second).
LONG_POLL_CHECK_SECONDS = 0.25
LONG_POLL_MAX_SECONDS = 60.0
LONG_POLLS_PER_TRIAL = 2
_open_long_polls: Counter[int] = Counter()


# The looks of all long polls share these few threads: run in the server's default thread pool,
# hundreds of polls looking four times a second took its threads (40) from every other request.
_LOOK_THREADS = anyio.CapacityLimiter(4)


async def _run_look(function: Callable[[Database, int], T], db: Database, trial_id: int) -> T:
    return await anyio.to_thread.run_sync(function, db, trial_id, limiter=_LOOK_THREADS)


def _owner_of(db: Database, trial_id: int) -> str:
    with db.read() as conn:
        trial = trials.get_trial(conn, trial_id)
        return str(experiments.get_experiment(conn, trial.experiment_id).owner)


@router.get("/trials/{trial_id}/preemption", response_model=Preemption)
async def preemption(
    trial_id: TrialAuth,
    timeout_seconds: Annotated[float, Query(ge=0, le=LONG_POLL_MAX_SECONDS)] = 0,
) -> dict:
    """Whether the trial should checkpoint and exit 0. With ``timeout_seconds`` it is a long poll:
    answered as soon as the answer is yes, else no once that long has passed (the Core API's
    watcher keeps one open, so the trial learns of a pause or preemption within moments)."""
    db = get_database()
    owner = await _run_look(_owner_of, db, trial_id)
    if _open_long_polls[trial_id] >= LONG_POLLS_PER_TRIAL:
        raise HTTPException(
            status_code=429,
            detail=f"trial {trial_id} already holds {LONG_POLLS_PER_TRIAL} preemption long polls open; "
            "wait for one to answer",
        )
    _open_long_polls[trial_id] += 1
    try:
        with caps.long_polls.hold(owner):
            deadline = time.monotonic() + timeout_seconds
            while True:
                preempt = await _run_look(trials.preemption_answer, db, trial_id)
                left = deadline - time.monotonic()
                if preempt or left <= 0:
                    return {"preempt": preempt}
                await asyncio.sleep(min(LONG_POLL_CHECK_SECONDS, left))
    finally:
        _open_long_polls[trial_id] -= 1
        if not _open_long_polls[trial_id]:
            del _open_long_polls[trial_id]


@router.post("/trials/{trial_id}/progress", response_model=Empty)
def progress(trial_id: TrialAuth, body: Progress) -> dict:
    with get_database().begin() as conn:
        reports.report_progress(conn, trial_id, body.progress)
    return {}


@router.post("/trials/{trial_id}/early_exit", response_model=Empty)
def early_exit(trial_id: TrialAuth, body: EarlyExit) -> dict:
    with get_database().begin() as conn:
        reports.report_early_exit(conn, trial_id, body.reason)
    return {}


@router.post("/trials/{trial_id}/checkpoints", response_model=CheckpointAnswer)
def register_checkpoint(trial_id: TrialAuth, body: CheckpointIn) -> dict:
    with get_database().begin() as conn:
        row = reports.register_checkpoint(conn, trial_id, body.model_dump())
    return {"checkpoint": serialize.checkpoint(row)}


@router.get("/checkpoints/{uuid}", response_model=CheckpointAnswer)
def get_checkpoint(uuid: str, trial_id: AnyTrialAuth) -> dict:
    with get_database().read() as conn:
        row = reports.get_checkpoint(conn, uuid)
        if not trials.may_read_checkpoint(conn, trial_id, row):
            raise HTTPException(
                status_code=403,
                detail=f"trial {trial_id} may not read checkpoint {uuid}: it belongs to another user's "
                "experiment and is not the checkpoint this experiment warm-starts from",
            )
        return {"checkpoint": serialize.checkpoint(row)}


@router.delete("/checkpoints/{uuid}", response_model=Empty)
def delete_checkpoint(uuid: str, trial_id: AnyTrialAuth) -> dict:
    with get_database().begin() as conn:
        reports.delete_checkpoint(conn, trial_id, uuid)
    return {}


@router.get("/trials/{trial_id}/best_validation", response_model=BestValidationAnswer)
def best_validation(trial_id: TrialAuth) -> dict:
    with get_database().read() as conn:
        return {"metric": reports.experiment_best_validation(conn, trial_id)}


@router.get("/trials/{trial_id}/searcher/operation", response_model=SearcherOperation)
def searcher_operation(trial_id: TrialAuth) -> dict:
    with get_database().read() as conn:
        return reports.searcher_operation(conn, trial_id)


@router.post("/trials/{trial_id}/searcher/completed", response_model=Empty)
def searcher_completed(trial_id: TrialAuth, body: SearcherCompleted) -> dict:
    with get_database().begin() as conn:
        reports.searcher_completed(conn, trial_id)
    return {}


@router.get("/trials/{trial_id}/context", response_class=Response, responses=routes_people.CONTEXT_ANSWER)
def trial_context(trial_id: TrialAuth) -> Response:
    """The experiment's context tar.gz, for a trial that unpacks it itself (a Kubernetes pod)."""
    with get_database().read() as conn:
        experiment_id = trials.get_trial(conn, trial_id).experiment_id
    return routes_people.experiment_context(experiment_id)
