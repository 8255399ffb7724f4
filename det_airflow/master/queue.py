"""The job queue: which waiting trials the master admits to run, per resource pool.

A job is an experiment. Jobs of a pool are ordered by priority (lower first), then queue position
(the experiment id unless moved with ``--ahead-of``/``--behind-of``). A trial is admitted only when
its whole gang (``slots_per_trial``) is free, and never past a waiting job ahead of it that could fit
the pool: that job keeps its place. A job whose gang is larger than the pool (or than its own
``max_slots``) can never run, so it blocks no one. Admitted trials hold their slots until their run
ends. :func:`plan` is the pure decision; the rest reads and writes the det tables.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, func, select, text

from det_airflow.errors import DetError
from det_airflow.master import airflow_bridge, schema
from det_airflow.master.experiments import now
from det_airflow.states import ExperimentState, TrialState

# Trials whose run has started and not yet ended hold their slots.
RUNNING_STATES = (
    TrialState.STARTING,
    TrialState.RUNNING,
    TrialState.STOPPING_COMPLETED,
    TrialState.STOPPING_CANCELED,
    TrialState.STOPPING_KILLED,
    TrialState.STOPPING_ERROR,
)
# Trials between runs: they wait for admission, or have it and hold their slots until they start.
BETWEEN_RUNS = (TrialState.QUEUED, TrialState.PAUSED)
FINISHED_EXPERIMENTS = tuple(
    s for s in ExperimentState if s.is_terminal or s in (ExperimentState.DELETING, ExperimentState.DELETED)
)

STATE_QUEUED = "STATE_QUEUED"
STATE_SCHEDULED = "STATE_SCHEDULED"
TYPE_EXPERIMENT = "TYPE_EXPERIMENT"


class QueueError(DetError):
    """A job queue change that cannot be made (bad anchor, pool, or value)."""


@dataclass(frozen=True)
class Job:
    """One job of a pool, as the gate sees it."""

    id: int
    priority: int
    position: float
    slots_per_trial: int  # the gang: slots one trial takes at once (at least 1, as Airflow counts)
    held: int = 0  # slots its admitted trials hold
    waiting: int = 0  # trials waiting for admission
    max_slots: int | None = None


@dataclass(frozen=True)
class Plan:
    """The gate's answer for one pool."""

    order: list[Job]  # scheduling order
    admitted: dict[int, int] = field(default_factory=dict)  # job id -> trials that may start now
    unfit: frozenset[int] = frozenset()  # jobs whose gang can never fit

    def admits(self, job_id: int) -> bool:
        return self.admitted.get(job_id, 0) > 0


def order_key(job: Job) -> tuple[int, float, int]:
    return (job.priority, job.position, job.id)


def plan(capacity: int, jobs: Iterable[Job]) -> Plan:
    """Admit waiting trials in scheduling order, whole gangs only, with no backfill past a job
    that waits for slots it could get. ``capacity`` is the pool's slots, -1 for unlimited."""
    order = sorted(jobs, key=order_key)
    free: int | None = None if capacity < 0 else capacity - sum(job.held for job in order)
    admitted: dict[int, int] = {}
    unfit: set[int] = set()
    blocked = False
    for job in order:
        need = job.slots_per_trial
        if (capacity >= 0 and need > capacity) or (job.max_slots is not None and need > job.max_slots):
            unfit.add(job.id)
            continue
        if blocked or job.waiting == 0:
            continue
        count = job.waiting
        capped = False
        if job.max_slots is not None:
            room = max(0, (job.max_slots - job.held) // need)
            if room < count:
                count, capped = room, True
        if free is not None:
            fits = max(0, free // need)
            if fits < count:
                count, capped = fits, False
            free -= count * need
        if count:
            admitted[job.id] = count
        # A job short of slots keeps its place: nothing behind it may start. One held back only by
        # its own max_slots does not stop the others.
        blocked = count < job.waiting and not capped
    return Plan(order=order, admitted=admitted, unfit=frozenset(unfit))


# --- the det tables ----------------------------------------------------------------------------


def _gang(config: dict[str, Any]) -> int:
    # Airflow gives a task at least one pool slot, even a trial that needs no GPU.
    return max(1, int(config.get("resources", {}).get("slots_per_trial", 1)))


def effective(row: Row) -> dict[str, Any]:
    """An experiment's queue settings: the override columns, else its config's `resources`."""
    resources = row.config.get("resources", {})
    return {
        "priority": row.priority if row.priority is not None else int(resources.get("priority", 42)),
        "weight": row.weight if row.weight is not None else float(resources.get("weight", 1.0)),
        "max_slots": row.max_slots if row.max_slots is not None else resources.get("max_slots"),
        "position": row.queue_position if row.queue_position is not None else float(row.id),
        "slots_per_trial": _gang(row.config),
    }


def _counts(
    exp_state: str, trial_state: str, admitted: bool, pause_requested: bool, stop_requested: bool
) -> tuple[bool, bool]:
    """(holds its slots, waits for admission) for trials in this condition."""
    if trial_state in RUNNING_STATES:
        return True, False
    if exp_state != ExperimentState.ACTIVE or pause_requested:
        return False, False  # between runs and not meant to run now: holds nothing, waits for nothing
    if admitted:
        return True, False
    return False, not stop_requested


@dataclass(frozen=True)
class PoolSnapshot:
    pool: str
    capacity: int
    rows: dict[int, Row]  # experiment id -> experiment row
    jobs: list[Job]
    trials_held: dict[int, int]  # experiment id -> trials holding slots

    def plan(self) -> Plan:
        return plan(self.capacity, self.jobs)


def pool_capacity(pool: str) -> int:
    slots = airflow_bridge.pool_slots(pool)
    return 0 if slots is None else slots  # a pool deleted under waiting jobs admits nothing


@functools.cache
def _statements() -> tuple[Any, Any]:
    """The two queries of a snapshot, built once (building them costs more than running them)."""
    exps, trials = schema.experiments, schema.trials
    unfinished = and_(
        exps.c.resource_pool == bindparam("pool"),
        exps.c.state.not_in([s.value for s in FINISHED_EXPERIMENTS]),
    )
    columns = [
        exps.c[name]
        for name in (
            "id",
            "name",
            "owner",
            "state",
            "config",
            "resource_pool",
            "start_time",
            "priority",
            "weight",
            "max_slots",
            "queue_position",
        )
    ]
    jobs = select(*columns).where(unfinished)
    counts = (
        select(
            trials.c.experiment_id,
            exps.c.state,
            trials.c.state,
            trials.c.admitted_run > trials.c.run_id,
            trials.c.pause_requested,
            trials.c.stop_requested,
            func.count(),
        )
        .join(exps, exps.c.id == trials.c.experiment_id)
        .where(unfinished, trials.c.state.in_([s.value for s in (*RUNNING_STATES, *BETWEEN_RUNS)]))
        .group_by(
            trials.c.experiment_id,
            exps.c.state,
            trials.c.state,
            trials.c.admitted_run > trials.c.run_id,
            trials.c.pause_requested,
            trials.c.stop_requested,
        )
    )
    return jobs, counts


def snapshot(conn: Connection, pool: str, capacity: int | None = None) -> PoolSnapshot:
    """Every unfinished job of ``pool`` with the slots it holds and the trials it has waiting."""
    jobs_query, counts_query = _statements()
    rows = {row.id: row for row in conn.execute(jobs_query, {"pool": pool})}
    counts: dict[int, tuple[int, int]] = {}
    if rows:
        for exp_id, exp_state, *condition, number in conn.execute(counts_query, {"pool": pool}):
            holds, waits = _counts(exp_state, *condition)
            held, wait = counts.get(exp_id, (0, 0))
            counts[exp_id] = (held + number * holds, wait + number * waits)
    jobs = []
    for exp_id, row in rows.items():
        settings = effective(row)
        held, wait = counts.get(exp_id, (0, 0))
        jobs.append(
            Job(
                id=exp_id,
                priority=settings["priority"],
                position=settings["position"],
                slots_per_trial=settings["slots_per_trial"],
                held=held * settings["slots_per_trial"],
                waiting=wait,
                max_slots=settings["max_slots"],
            )
        )
    return PoolSnapshot(
        pool=pool,
        capacity=pool_capacity(pool) if capacity is None else capacity,
        rows=rows,
        jobs=jobs,
        trials_held={exp_id: held for exp_id, (held, _) in counts.items()},
    )


def is_admitted(trial: Row) -> bool:
    """The trial holds an admission for its next run."""
    return bool(trial.admitted_run > trial.run_id)


def admit(conn: Connection, exp: Row, trial: Row) -> bool:
    """Ask the gate for the trial's next run; an admission is recorded and holds its slots."""
    if is_admitted(trial) or trial.state in RUNNING_STATES:
        return True  # a run that is starting again (a retried task) keeps the slots it holds
    if conn.dialect.name == "postgresql":
        # Decisions in one pool are taken one at a time, so two trials never both get the last slots.
        # On SQLite the master already serializes its writing transactions (db.Database.begin).
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:key)"), {"key": zlib.crc32(exp.resource_pool.encode())}
        )
    if not snapshot(conn, exp.resource_pool).plan().admits(exp.id):
        return False
    conn.execute(
        schema.trials.update()
        .where(schema.trials.c.id == trial.id)
        .values(admitted_run=trial.run_id + 1, admitted_at=now())
    )
    return True


# --- what `det job list` shows ----------------------------------------------------------------


def job_rows(conn: Connection, pool: str, capacity: int | None = None) -> list[dict[str, Any]]:
    """The jobs of a pool in scheduling order, as `det job list` shows them."""
    snap = snapshot(conn, pool, capacity)
    result = plan(snap.capacity, snap.jobs)
    rows = []
    for ahead, job in enumerate(result.order):
        row = snap.rows[job.id]
        settings = effective(row)
        # A job whose searcher has not asked for trials yet still needs one trial's slots to start.
        needed = max(job.held + job.waiting * job.slots_per_trial, job.slots_per_trial)
        rows.append(
            {
                "jobs_ahead": ahead,
                "id": job.id,
                "type": TYPE_EXPERIMENT,
                "name": row.name,
                "priority": job.priority,
                "weight": settings["weight"],
                "max_slots": job.max_slots,
                "submitted": row.start_time.isoformat() if row.start_time else None,
                "acquired_slots": job.held,
                "needed_slots": needed,
                "slots_per_trial": job.slots_per_trial,
                "state": STATE_SCHEDULED if job.held > 0 else STATE_QUEUED,
                "fits_pool": job.id not in result.unfit,
                "user": row.owner,
                "resource_pool": pool,
                "experiment_state": row.state,
            }
        )
    return rows


def pools_in_use(conn: Connection) -> list[str]:
    exps = schema.experiments
    query = (
        select(exps.c.resource_pool)
        .where(exps.c.state.not_in([s.value for s in FINISHED_EXPERIMENTS]))
        .distinct()
        .order_by(exps.c.resource_pool)
    )
    return list(conn.execute(query).scalars())


# --- changes ---------------------------------------------------------------------------------


def position_near(jobs: Sequence[Job], anchor_id: int, *, ahead: bool, moving_id: int) -> float:
    """A queue position just ahead of or behind the anchor: halfway to its neighbour, as
    Determined's seed era placed jobs."""
    peers = sorted((job for job in jobs if job.id != moving_id), key=order_key)
    index = next(i for i, job in enumerate(peers) if job.id == anchor_id)
    anchor = peers[index]
    same = [job for job in peers if job.priority == anchor.priority]
    at = same.index(anchor)
    if ahead:
        return (same[at - 1].position + anchor.position) / 2 if at > 0 else anchor.position - 1
    return (anchor.position + same[at + 1].position) / 2 if at + 1 < len(same) else anchor.position + 1
