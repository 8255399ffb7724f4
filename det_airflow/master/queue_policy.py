"""The job queue's decisions, per resource pool: which waiting trials to admit, which running ones
to preempt, where a moved job goes. Pure functions over plain values: the det tables are read and
written in master/queue.py.

A job is an experiment. Jobs of a pool are ordered by priority (lower first), then queue position
(the experiment id unless moved with ``--ahead-of``/``--behind-of``). A trial is admitted only when
its whole gang (``slots_per_trial``) is free, and never past a waiting job ahead of it that could fit
the pool: that job keeps its place. A job whose gang is larger than the pool (or than its own
``max_slots``) can never run, so it blocks no one. Admitted trials hold their slots until their run
ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from det_airflow import settings
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


def _fits(job: Job, capacity: int) -> bool:
    need = job.slots_per_trial
    return not ((capacity >= 0 and need > capacity) or (job.max_slots is not None and need > job.max_slots))


def _has_room(job: Job, held: int) -> bool:
    return job.max_slots is None or held + job.slots_per_trial <= job.max_slots


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
    preemptible: bool = True  # False for tasks (notebooks, shells, ...): Determined never preempts them


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
    candidates = sorted((h for h in everyone if not h.releasing and h.preemptible), key=_victim_order)
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
    candidates = sorted(
        (h for h in everyone if not h.releasing and h.preemptible), key=lambda h: (-h.since, -h.trial_id)
    )
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


# --- which trials hold slots ------------------------------------------------------------------


def holds_and_waits(
    exp_state: str, trial_state: str, admitted: bool, pause_requested: bool, stop_requested: bool
) -> tuple[bool, bool]:
    """(holds its slots, waits for admission) for a trial in this condition: ``admitted``, it holds
    an admission for its next run."""
    if trial_state in RUNNING_STATES:
        return True, False
    if exp_state != ExperimentState.ACTIVE or pause_requested:
        return False, False  # between runs and not meant to run now: holds nothing, waits for nothing
    if admitted:
        return True, False
    return False, not stop_requested


# --- moving a job ------------------------------------------------------------------------------


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


# --- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueSettings:
    """How pools share their slots and which preempt (airflow.cfg ``[det]``, read by the caller)."""

    scheduler: str  # every pool's, unless named in fair_share_pools
    preemption: bool  # every pool preempts
    preemption_pools: tuple[str, ...]
    fair_share_pools: tuple[str, ...]

    def scheduler_of(self, pool: str) -> str:
        """How ``pool``'s slots are shared: ``priority`` or ``fair_share``."""
        return settings.FAIR_SHARE if pool in self.fair_share_pools else self.scheduler

    def preempts(self, pool: str) -> bool:
        """Whether waiting jobs of ``pool`` may preempt lower-priority trials."""
        return self.preemption or pool in self.preemption_pools

    def preempts_anywhere(self) -> bool:
        return self.preemption or bool(self.preemption_pools)
