"""The job queue on the det tables: a pool's jobs as the queue policy sees them
(master/queue_policy.py), the admissions and preemptions it decides recorded, the queue settings
read, and what `det job list` shows."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, func, null, select, text

from det_airflow import settings
from det_airflow.config import ResourcesConfig
from det_airflow.errors import DetError
from det_airflow.master import airflow_bridge, experiments, hosts, placement, schema, tasks
from det_airflow.master.lifecycle import now
from det_airflow.master.queue_policy import (
    BETWEEN_RUNS,
    FINISHED_EXPERIMENTS,
    RUNNING_STATES,
    Holder,
    Job,
    Plan,
    QueueSettings,
    choose_fair_share_preemptions,
    choose_preemptions,
    holds_and_waits,
    plan,
    plan_fair_share,
)
from det_airflow.states import ExperimentState, TrialState

STATE_QUEUED = "STATE_QUEUED"
STATE_SCHEDULED = "STATE_SCHEDULED"
# Not one of Determined's job states: a paused experiment keeps its place but asks for nothing.
STATE_PAUSED = "STATE_PAUSED"
TYPE_EXPERIMENT = "TYPE_EXPERIMENT"


class QueueError(DetError):
    """A job queue change that cannot be made (bad anchor, pool, or value)."""


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
            holds, waits = holds_and_waits(exp_state, *condition)
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


def _lock_hosts(conn: Connection) -> None:
    """Place trials one at a time across pools: every pool's trials share the hosts."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": zlib.crc32(b"det-hosts")})


def admit(conn: Connection, exp: Row, trial: Row, prefer_host: str | None = None) -> bool:
    """Ask the gate for the trial's next run; an admission is recorded and holds its slots. While
    worker hosts report, the admission also places the trial's whole gang on one of them (best
    fit, ``prefer_host`` between equally good hosts); a trial no live host has room for waits."""
    if is_admitted(trial) or trial.state in RUNNING_STATES:
        return True  # a run that is starting again (a retried task) keeps the slots it holds
    _lock_pool(conn, exp.resource_pool)
    if not snapshot(conn, exp.resource_pool).plan().admits(exp.id):
        return False
    _lock_hosts(conn)
    loads = hosts.loads(conn) if placement.placed_on_hosts(exp.config) else []
    nodes = placement.place_gang(loads, _gang(exp.config), prefer_host) if loads else None
    if loads and nodes is None:
        return False
    conn.execute(
        schema.trials.update()
        .where(schema.trials.c.id == trial.id)
        .values(
            admitted_run=trial.run_id + 1,
            admitted_at=now(),
            host=nodes[0].host if nodes else None,
            # SQL NULL (not JSON null) for a gang on one host: a host's holdings select on it.
            nodes=[{"host": n.host, "slots": n.slots} for n in nodes] if nodes and len(nodes) > 1 else null(),
        )
    )
    return True


class QueueConfigError(DetError):
    """The `[det]` job queue settings of airflow.cfg cannot be read."""


def queue_settings() -> QueueSettings:
    """The job queue's settings of airflow.cfg ``[det]``, checked."""
    current = settings.load()
    try:
        return QueueSettings(
            scheduler=current.scheduler,
            preemption=current.preemption,
            preemption_pools=current.preemption_pools,
            fair_share_pools=current.fair_share_pools,
        )
    except settings.SettingsError as exc:
        raise QueueConfigError(str(exc)) from None


def scheduler(pool: str) -> str:
    """How the pool's slots are shared (airflow.cfg ``[det] scheduler``, ``fair_share_pools``)."""
    return queue_settings().scheduler_of(pool)


def preemption_enabled(pool: str) -> bool:
    """Whether waiting jobs of ``pool`` may preempt lower-priority trials (airflow.cfg ``[det]``)."""
    return queue_settings().preempts(pool)


def preemption_anywhere() -> bool:
    """Whether any pool preempts: a settings read, no query."""
    return queue_settings().preempts_anywhere()


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
    task_jobs = experiments.task_ids(conn, list(snap.rows))
    result = []
    for row in rows:
        exp_state = snap.rows[row.experiment_id].state
        holds, _ = holds_and_waits(
            exp_state, row.state, is_admitted(row), row.pause_requested, row.stop_requested
        )
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
                preemptible=row.experiment_id not in task_jobs,
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
    chosen = preemptions_due(conn, pool)
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


def preemptions_due(conn: Connection, pool: str) -> dict[int, int]:
    """The preemptions :func:`preempt_for_waiting` would make in ``pool`` now, without making
    them: a look that needs no write transaction."""
    snap = snapshot(conn, pool)
    choose = choose_fair_share_preemptions if snap.fair_share else choose_preemptions
    return choose(snap.capacity, snap.jobs, holders(conn, snap))


# --- what `det job list` shows ----------------------------------------------------------------


def job_rows(conn: Connection, pool: str, capacity: int | None = None) -> list[dict[str, Any]]:
    """The jobs of a pool in scheduling order, as `det job list` shows them."""
    snap = snapshot(conn, pool, capacity)
    result = plan(snap.capacity, snap.jobs)
    preempting = _preempting(conn, list(snap.rows))
    task_jobs = experiments.task_ids(conn, list(snap.rows))
    # While worker hosts report, a trial's gang must fit one of them whole, or several together,
    # on the slots an admin has not disabled.
    holdings = hosts.holdings(conn)
    live = hosts.loads(conn, holdings)
    largest_host = max((host.enabled_slots for host in live), default=None)
    job_hosts: dict[int, set[str]] = {}
    for host_id, held in holdings.items():
        for _, exp_id, _ in held:
            job_hosts.setdefault(exp_id, set()).add(host_id)
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
                "type": tasks.JOB_TYPES[task_jobs[job.id]] if job.id in task_jobs else TYPE_EXPERIMENT,
                "name": row.name,
                "priority": job.priority,
                "weight": settings["weight"],
                "max_slots": job.max_slots,
                "submitted": row.start_time.isoformat() if row.start_time else None,
                "acquired_slots": job.held,
                "needed_slots": needed,
                "slots_per_trial": job.slots_per_trial,
                "state": (
                    STATE_PAUSED
                    if row.state == ExperimentState.PAUSED
                    else STATE_SCHEDULED
                    if job.held > 0
                    else STATE_QUEUED
                ),
                "preempting_trials": preempting.get(job.id, 0),
                "fits_pool": job.id not in result.unfit,
                "largest_host_slots": largest_host,
                "fits_hosts": placement.fits_together(live, job.slots_per_trial) if live else None,
                "user": row.owner,
                "resource_pool": pool,
                "experiment_state": row.state,
                "hosts": sorted(job_hosts.get(job.id, ())),
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
