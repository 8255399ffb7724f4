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

from det_airflow import settings
from det_airflow.config import ResourcesConfig
from det_airflow.errors import DetError
from det_airflow.master import airflow_bridge, schema
from det_airflow.master.experiments import now
from det_airflow.states import ExperimentState, TrialState

# Trials whose run has started and not yet ended hold their slots.
RUNNING_STATES = (
    TrialState.PULLING,
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
    weight: float = 1.0  # fair share: slots are divided in proportion to it


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
        if not _fits(job, capacity):
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


@dataclass(frozen=True)
class Holder:
    """A trial that holds slots of a pool (running, or admitted and about to start)."""

    trial_id: int
    job_id: int
    priority: int
    slots: int
    since: float  # when its run was admitted: the newest runs are preempted first
    releasing: bool = False  # already on its way out (preempted, paused, stopping): its slots free soon


def _victim_order(holder: Holder) -> tuple[int, float, int]:
    return (-holder.priority, -holder.since, -holder.trial_id)


def choose_preemptions(capacity: int, jobs: Iterable[Job], holders: Iterable[Holder]) -> dict[int, int]:
    """The trials to preempt so that waiting jobs fit: trial id -> the job it makes room for.

    Waiting trials are served in scheduling order, as :func:`plan` admits them, counting the slots
    of trials already on their way out as free. A trial that does not fit takes slots from trials of
    strictly lower priority (numerically greater): priority 99 first, then the newest, no more than
    it needs. When even all of those would not make room, nothing more is chosen: that job keeps
    its place and every job behind it waits too, as without preemption.
    """
    if capacity < 0:
        return {}
    order = sorted(jobs, key=order_key)
    everyone = list(holders)
    free = capacity - sum(job.held for job in order) + sum(h.slots for h in everyone if h.releasing)
    candidates = sorted((h for h in everyone if not h.releasing), key=_victim_order)
    chosen: dict[int, int] = {}
    for job in order:
        need = job.slots_per_trial
        if not _fits(job, capacity) or job.waiting == 0:
            continue
        count = job.waiting
        if job.max_slots is not None:
            count = min(count, max(0, (job.max_slots - job.held) // need))
        for _ in range(count):
            if free < need:
                lower = [h for h in candidates if h.priority > job.priority]
                picks = _fewest(lower, need - free)
                if picks is None:
                    return chosen
                chosen.update((h.trial_id, job.id) for h in picks)
                candidates = [h for h in candidates if h not in picks]
                free += sum(h.slots for h in picks)
            free -= need
    return chosen


def _fewest(candidates: list[Holder], short: int) -> list[Holder] | None:
    """Candidates in victim order until ``short`` slots are found, then without any pick the rest
    do not need (a big trial taken last can make smaller ones taken before it unnecessary)."""
    picks: list[Holder] = []
    gained = 0
    for holder in candidates:
        if gained >= short:
            break
        picks.append(holder)
        gained += holder.slots
    if gained < short:
        return None
    for holder in reversed(picks[:-1]):
        if gained - holder.slots >= short:
            picks.remove(holder)
            gained -= holder.slots
    return picks


# --- fair share ([det] scheduler = fair_share) -------------------------------------------------


def _fits(job: Job, capacity: int) -> bool:
    need = job.slots_per_trial
    return not ((capacity >= 0 and need > capacity) or (job.max_slots is not None and need > job.max_slots))


def _has_room(job: Job, held: int) -> bool:
    return job.max_slots is None or held + job.slots_per_trial <= job.max_slots


def fair_shares(capacity: int, jobs: Iterable[Job]) -> dict[int, float]:
    """Each job's share of the pool: its slots divided in proportion to ``weight`` among the jobs
    that want some, none given more than it wants (its held and waiting slots, up to max_slots);
    what one cannot use goes to the others."""
    demand: dict[int, float] = {}
    weight: dict[int, float] = {}
    for job in jobs:
        wanted = job.held + job.waiting * job.slots_per_trial if _fits(job, capacity) else job.held
        demand[job.id] = float(min(wanted, job.max_slots) if job.max_slots is not None else wanted)
        weight[job.id] = job.weight
    if capacity < 0:
        return demand
    shares = dict.fromkeys(demand, 0.0)
    active = {job_id for job_id, wanted in demand.items() if wanted > 0}
    remaining = float(capacity)
    while active and remaining > 1e-9:
        unit = remaining / sum(weight[job_id] for job_id in active)
        full = {job_id for job_id in active if demand[job_id] - shares[job_id] <= unit * weight[job_id]}
        if not full:
            for job_id in active:
                shares[job_id] += unit * weight[job_id]
            break
        for job_id in full:
            remaining -= demand[job_id] - shares[job_id]
            shares[job_id] = demand[job_id]
        active -= full
    return shares


def _next_fair(
    fitting: list[Job],
    shares: dict[int, float],
    held: dict[int, int],
    left: dict[int, int],
    *,
    below_share_only: bool = False,
) -> Job | None:
    """The job whose trial goes next: one below its share first, then (so no slot idles, unless
    ``below_share_only``) any; the one holding the fewest slots for its weight."""
    eligible = [job for job in fitting if left[job.id] > 0 and _has_room(job, held[job.id])]
    below = [job for job in eligible if held[job.id] + job.slots_per_trial <= shares[job.id] + 1e-9]
    candidates = below if below_share_only else below or eligible
    if not candidates:
        return None
    return min(candidates, key=lambda job: (held[job.id] / job.weight, order_key(job)))


def plan_fair_share(capacity: int, jobs: Iterable[Job]) -> Plan:
    """Admit waiting trials by fair share, whole gangs only: the job furthest below its share goes
    first, and a job that waits for slots keeps its turn (nothing is admitted past it)."""
    order = sorted(jobs, key=order_key)
    if capacity < 0:
        return plan(capacity, order)
    unfit = frozenset(job.id for job in order if not _fits(job, capacity))
    fitting = [job for job in order if job.id not in unfit]
    shares = fair_shares(capacity, fitting)
    held = {job.id: job.held for job in order}
    left = {job.id: job.waiting for job in order}
    free = capacity - sum(held.values())
    admitted: dict[int, int] = {}
    while (job := _next_fair(fitting, shares, held, left)) is not None and job.slots_per_trial <= free:
        held[job.id] += job.slots_per_trial
        free -= job.slots_per_trial
        left[job.id] -= 1
        admitted[job.id] = admitted.get(job.id, 0) + 1
    return Plan(order=order, admitted=admitted, unfit=unfit)


def choose_fair_share_preemptions(
    capacity: int, jobs: Iterable[Job], holders: Iterable[Holder]
) -> dict[int, int]:
    """Under fair share, the trials to preempt: trial id -> the job it makes room for.

    A job below its share whose next trial does not fit takes slots from jobs above their share,
    newest trials first and no more than it needs; a job is never taken below its share, so two
    jobs never take slots back and forth.
    """
    if capacity < 0:
        return {}
    order = sorted(jobs, key=order_key)
    fitting = [job for job in order if _fits(job, capacity)]
    shares = fair_shares(capacity, fitting)
    everyone = list(holders)
    held = {job.id: job.held for job in order}
    for leaving in (h for h in everyone if h.releasing):
        held[leaving.job_id] -= leaving.slots
    free = capacity - sum(held.values())
    left = {job.id: job.waiting for job in order}
    candidates = sorted((h for h in everyone if not h.releasing), key=lambda h: (-h.since, -h.trial_id))
    chosen: dict[int, int] = {}
    while (job := _next_fair(fitting, shares, held, left, below_share_only=True)) is not None:
        need = job.slots_per_trial
        picks: list[Holder] = []
        after = dict(held)
        for victim in candidates:
            if free + sum(h.slots for h in picks) >= need:
                break
            if victim.job_id != job.id and after[victim.job_id] - victim.slots >= shares.get(
                victim.job_id, 0.0
            ):
                picks.append(victim)
                after[victim.job_id] -= victim.slots
        if free + sum(h.slots for h in picks) < need:
            return chosen
        for victim in picks:
            chosen[victim.trial_id] = job.id
            candidates.remove(victim)
        held = after
        free += sum(h.slots for h in picks) - need
        held[job.id] += need
        left[job.id] -= 1
    return chosen


# --- the det tables ----------------------------------------------------------------------------


def _gang(config: dict[str, Any]) -> int:
    # Airflow gives a task at least one pool slot, even a trial that needs no GPU.
    return max(1, int(config.get("resources", {}).get("slots_per_trial", 1)))


def effective(row: Row) -> dict[str, Any]:
    """An experiment's queue settings: the override columns, else its config's `resources`."""
    resources = row.config.get("resources", {})
    return {
        "priority": row.priority
        if row.priority is not None
        else int(resources.get("priority", ResourcesConfig.priority)),
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
    fair_share: bool  # [det] scheduler = fair_share
    rows: dict[int, Row]  # experiment id -> experiment row
    jobs: list[Job]
    trials_held: dict[int, int]  # experiment id -> trials holding slots

    def plan(self) -> Plan:
        return (plan_fair_share if self.fair_share else plan)(self.capacity, self.jobs)


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
        queue_settings = effective(row)
        held, wait = counts.get(exp_id, (0, 0))
        jobs.append(
            Job(
                id=exp_id,
                priority=queue_settings["priority"],
                position=queue_settings["position"],
                slots_per_trial=queue_settings["slots_per_trial"],
                held=held * queue_settings["slots_per_trial"],
                waiting=wait,
                max_slots=queue_settings["max_slots"],
                weight=queue_settings["weight"],
            )
        )
    return PoolSnapshot(
        pool=pool,
        capacity=pool_capacity(pool) if capacity is None else capacity,
        fair_share=scheduler(pool) == settings.FAIR_SHARE,
        rows=rows,
        jobs=jobs,
        trials_held={exp_id: held for exp_id, (held, _) in counts.items()},
    )


def _lock_pool(conn: Connection, pool: str) -> None:
    """Take the pool's decisions one at a time, so two trials never both get the last slots.

    On SQLite the master already serializes its writing transactions (db.Database.begin).
    """
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": zlib.crc32(pool.encode())})


def is_admitted(trial: Row) -> bool:
    """The trial holds an admission for its next run."""
    return bool(trial.admitted_run > trial.run_id)


def admit(conn: Connection, exp: Row, trial: Row) -> bool:
    """Ask the gate for the trial's next run; an admission is recorded and holds its slots."""
    if is_admitted(trial) or trial.state in RUNNING_STATES:
        return True  # a run that is starting again (a retried task) keeps the slots it holds
    _lock_pool(conn, exp.resource_pool)
    if not snapshot(conn, exp.resource_pool).plan().admits(exp.id):
        return False
    conn.execute(
        schema.trials.update()
        .where(schema.trials.c.id == trial.id)
        .values(admitted_run=trial.run_id + 1, admitted_at=now())
    )
    return True


# --- preemption ----------------------------------------------------------------------------------


class QueueConfigError(DetError):
    """The `[det]` job queue settings of airflow.cfg cannot be read."""


def _queue_settings() -> tuple[settings.Settings, str, bool]:
    """The settings with their checked ``scheduler`` and ``preemption``."""
    current = settings.load()
    try:
        return current, current.scheduler, current.preemption
    except settings.SettingsError as exc:
        raise QueueConfigError(str(exc)) from None


def scheduler(pool: str) -> str:
    """How the pool's slots are shared (airflow.cfg ``[det] scheduler``, ``fair_share_pools``)."""
    current, value, _ = _queue_settings()
    return settings.FAIR_SHARE if pool in current.fair_share_pools else value


def preemption_enabled(pool: str) -> bool:
    """Whether waiting jobs of ``pool`` may preempt lower-priority trials (airflow.cfg ``[det]``)."""
    current, _, everywhere = _queue_settings()
    return everywhere or pool in current.preemption_pools


def preemption_anywhere() -> bool:
    """Whether any pool preempts: a settings read, no query."""
    current, _, everywhere = _queue_settings()
    return everywhere or bool(current.preemption_pools)


_STARTED = (TrialState.PULLING, TrialState.STARTING, TrialState.RUNNING)
_ON_ITS_WAY_OUT = tuple(s for s in RUNNING_STATES if s not in _STARTED)


def holders(conn: Connection, snap: PoolSnapshot) -> list[Holder]:
    """The trials holding slots of the snapshot's pool, as :func:`choose_preemptions` sees them."""
    if not snap.rows:
        return []
    trials = schema.trials
    rows = conn.execute(
        select(
            trials.c.id,
            trials.c.experiment_id,
            trials.c.state,
            trials.c.run_id,
            trials.c.admitted_run,
            trials.c.admitted_at,
            trials.c.pause_requested,
            trials.c.stop_requested,
            trials.c.preempt_requested_at,
        ).where(
            trials.c.experiment_id.in_(list(snap.rows)),
            trials.c.state.in_([s.value for s in (*RUNNING_STATES, *BETWEEN_RUNS)]),
        )
    ).all()
    jobs = {job.id: job for job in snap.jobs}
    result = []
    for row in rows:
        exp_state = snap.rows[row.experiment_id].state
        holds, _ = _counts(exp_state, row.state, is_admitted(row), row.pause_requested, row.stop_requested)
        if not holds:
            continue
        job = jobs[row.experiment_id]
        releasing = (
            row.state in _ON_ITS_WAY_OUT
            or row.preempt_requested_at is not None
            or row.stop_requested
            or row.pause_requested
            or exp_state != ExperimentState.ACTIVE
        )
        result.append(
            Holder(
                trial_id=row.id,
                job_id=job.id,
                priority=job.priority,
                slots=job.slots_per_trial,
                since=row.admitted_at.timestamp() if row.admitted_at else 0.0,
                releasing=releasing,
            )
        )
    return result


def preempt_for_waiting(conn: Connection, pool: str) -> dict[int, int]:
    """Mark the lower-priority trials that must make room for the pool's waiting jobs, when the
    pool preempts; returns trial id -> the job it makes room for. A running trial is asked to
    checkpoint and exit (``should_preempt()``); one admitted but not started loses its admission."""
    if not preemption_enabled(pool):
        return {}
    _lock_pool(conn, pool)
    snap = snapshot(conn, pool)
    choose = choose_fair_share_preemptions if snap.fair_share else choose_preemptions
    chosen = choose(snap.capacity, snap.jobs, holders(conn, snap))
    if not chosen:
        return {}
    trials = schema.trials
    victims = list(chosen)
    conn.execute(
        trials.update()
        .where(trials.c.id.in_(victims), trials.c.state.in_(_STARTED))
        .values(preempt_requested_at=now())
    )
    conn.execute(
        trials.update()
        .where(trials.c.id.in_(victims), trials.c.state.in_([s.value for s in BETWEEN_RUNS]))
        .values(admitted_run=trials.c.run_id, admitted_at=None)
    )
    return chosen


# --- what `det job list` shows ----------------------------------------------------------------


def job_rows(conn: Connection, pool: str, capacity: int | None = None) -> list[dict[str, Any]]:
    """The jobs of a pool in scheduling order, as `det job list` shows them."""
    snap = snapshot(conn, pool, capacity)
    result = plan(snap.capacity, snap.jobs)
    preempting = _preempting(conn, list(snap.rows))
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
                "preempting_trials": preempting.get(job.id, 0),
                "fits_pool": job.id not in result.unfit,
                "user": row.owner,
                "resource_pool": pool,
                "experiment_state": row.state,
            }
        )
    return rows


def _preempting(conn: Connection, experiment_ids: list[int]) -> dict[int, int]:
    """Experiment id -> its running trials asked to make room and not yet gone."""
    if not experiment_ids:
        return {}
    trials = schema.trials
    query = (
        select(trials.c.experiment_id, func.count())
        .where(
            trials.c.experiment_id.in_(experiment_ids),
            trials.c.preempt_requested_at.is_not(None),
            trials.c.state.in_([s.value for s in RUNNING_STATES]),
        )
        .group_by(trials.c.experiment_id)
    )
    return {exp_id: int(count) for exp_id, count in conn.execute(query)}


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
