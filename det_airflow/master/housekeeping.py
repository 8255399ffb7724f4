"""The master's background jobs: work that belongs to no request, run by one process of the
deployment at a time.

Each job has a name, an interval and a function of the master's database. Every API server process
has a thread that starts when the master app starts serving (its lifespan, which Airflow's API
server runs for the apps that plugins mount) and stops with it; only the thread of the process that
leads (master/leadership.py: a PostgreSQL advisory lock, a file lock beside SQLite) runs the jobs at
their intervals, and another takes the lead when it dies. A job a request asks for (`run_soon`) runs
in that request's process as well. A job that fails is logged under its name and runs again at its
next turn; it never fails a request. docs/master-api.md lists the jobs.

What stays with requests, because it decides the request's own answer:

- a create preempts for the submitted experiment (``trials.make_room_for_submitted``): its
  admission, at once rather than at the next turn of ``preempt for waiting jobs``;
- a trial slot whose trial the queue does not admit preempts for it before it answers "wait"
  (``trials._admitted``).

Lost runs are not the asking slot's business: they belong to other experiments of its pool, so
``reclaim lost runs`` frees them here. A slot waiting on one (for pool slots, or for the result a
search waits on) gets its trial at its trigger's next look after the job has run: at most one job
interval plus one look later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import FastAPI

from det_airflow import settings
from det_airflow.master import experiment_files, leadership, removals, trial_logs, trials, webhook_sender
from det_airflow.master.db import Database, get_database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """A named piece of background work and how often it runs."""

    name: str
    every_seconds: float
    run: Callable[[Database], object]


def _publish_left_staged(db: Database) -> object:
    return experiment_files.publish_left_staged(db)


def _start_missing_runs(db: Database) -> object:
    return experiment_files.start_missing_runs(db)


def _retire_finished_files(db: Database) -> object:
    with db.read() as conn:
        return experiment_files.retire_finished_experiment_files(conn)


def _forget_deleted_dags(db: Database) -> object:
    with db.read() as conn:
        return experiment_files.forget_deleted_experiment_dags(conn)


def _delete_expired_logs(db: Database) -> object:
    return trial_logs.delete_expired_logs(db, settings.load().log_retention_days)


#: The job that deletes ended trials' logs past their experiment's retention_policy.
DELETE_EXPIRED_LOGS = "delete expired trial logs"
#: The job that removes queued files where no worker host reports; the requests that queue
#: removals ask for it at once (`run_soon`).
REMOVE_FILES = "remove files"
#: The job that starts slots told to move to another host; a slot's request that moved it asks for it.
START_PLACED_SLOTS = "start placed slots"

#: The job that ends the slots deferred waiting for a trial once their search is done; the
#: requests that end a search ask for it now and at each of END_SLOTS_LOOKS: a slot told to wait
#: as the search's last trial ended defers moments later.
END_SLOTS_LEFT_WAITING = "end slots left waiting"
END_SLOTS_LOOKS = (0.0, 0.5, 1.0, 2.0, 4.0)

#: The job that starts created experiments' runs that did not start with their DAG.
START_EXPERIMENT_RUNS = "start experiment runs"

#: The job that hands recorded webhook events to the sender's thread.
DELIVER_WEBHOOKS = "deliver webhooks"

# In the order a turn runs them: an experiment whose DAG run is gone ends before its runs would be
# reclaimed one by one as lost.
JOBS = (
    # Experiments changed behind the master, through Airflow's own API or UI.
    Job("end experiments ended in Airflow", 5.0, trials.end_experiments_ended_in_airflow),
    Job("reclaim lost runs", 5.0, trials.reclaim_lost_runs),
    # Only where preemption is on (airflow.cfg [det]); otherwise it costs no query.
    Job("preempt for waiting jobs", 2.0, trials.preempt_for_waiting_jobs),
    # A slot told its trial runs on another worker host deferred: start it there now.
    Job(START_PLACED_SLOTS, 2.0, trials.start_placed_slots),
    # While worker hosts report: slots freed are taken again at once, on the waiting trial's host.
    Job("start waiting slots", 2.0, trials.start_waiting_slots),
    # Slots deferred for more trials of a search that is done end now, not when their triggers look.
    Job(END_SLOTS_LEFT_WAITING, 30.0, trials.end_slots_left_waiting),
    # The node tasks of multi-node runs whose start the chief's own request could not make.
    Job("start waiting nodes", 2.0, trials.start_nodes),
    # A worker host that stopped heartbeating runs nothing more: its waiting tasks go to the others.
    Job("requeue from gone hosts", 5.0, trials.requeue_from_gone_hosts),
    # A create's publication interrupted by an API server that stopped (left for 60 s first).
    Job("publish left-staged experiments", 30.0, _publish_left_staged),
    # A created experiment's run that could not start as its DAG was written (its DAG has no
    # schedule, so the scheduler never starts it).
    Job(START_EXPERIMENT_RUNS, 5.0, _start_missing_runs),
    # Parsing grows with the experiments still to run, not with every experiment ever created.
    Job("retire finished experiment files", 30.0, _retire_finished_files),
    Job("forget deleted experiments' DAGs", 30.0, _forget_deleted_dags),
    # Checkpoints and trial folders queued for removal, on one machine (hosts remove their own).
    Job(REMOVE_FILES, 10.0, removals.remove_here),
    # Webhook events POSTed on a thread of their own: a silent receiver holds up no other job.
    Job(DELIVER_WEBHOOKS, 1.0, webhook_sender.deliver_in_background),
    # Retention is counted in days: a look an hour is soon enough.
    Job(DELETE_EXPIRED_LOGS, 3600.0, _delete_expired_logs),
)


def run_job(name: str, db: Database | None = None) -> bool:
    """Run the job called ``name`` now, as the thread does: a failure is logged, not raised.
    Answers whether it succeeded."""
    (job,) = [j for j in JOBS if j.name == name]
    return _run_logged(job, db or get_database())


def run_once(db: Database | None = None) -> bool:
    """Run every job once, in order; answers whether all succeeded."""
    db = db or get_database()
    return all([_run_logged(job, db) for job in JOBS])


_last_failure: dict[str, str] = {}


def _run_logged(job: Job, db: Database) -> bool:
    try:
        job.run(db)
    except Exception as exc:  # noqa: BLE001 - logged; the job runs again at its next turn
        failure = f"{type(exc).__name__}: {exc}"
        if _last_failure.get(job.name) != failure:  # a repeated failure is one line, not a traceback
            log.exception("housekeeping job '%s' failed; it runs again in %s s", job.name, job.every_seconds)
        else:
            log.warning("housekeeping job '%s' failed again: %s", job.name, failure)
        _last_failure[job.name] = failure
        return False
    _last_failure.pop(job.name, None)
    return True


# Wakes the thread early: its stop, or a job asked for sooner than its interval (`run_soon`).
_wake = threading.Event()
# Job name -> the monotonic times it was asked to run at.
_soon: dict[str, list[float]] = {}
_soon_lock = threading.Lock()


def run_soon(name: str, *after: float) -> None:
    """Run the job ``name`` at the thread's next turn, now rather than at its interval: a request
    that changed what the job looks at (a trial's end frees slots) need not wait for it. With
    ``after``, at each of those many seconds from now instead: a few quick looks for a change that
    follows the request by moments (a task deferring once told to move)."""
    now = time.monotonic()
    with _soon_lock:
        _soon.setdefault(name, []).extend(now + delay for delay in after or (0.0,))
    _wake.set()


def _take_soon(due: dict[str, float]) -> set[str]:
    """Bring forward in ``due`` the jobs asked for sooner than their next turn (one time each: the
    others wait until the job has run); answers their names."""
    taken = set()
    with _soon_lock:
        for name, times in _soon.items():
            first = min(times, default=None)
            if first is not None and name in due and first < due[name]:
                due[name] = first
                times.remove(first)
                taken.add(name)
        for name in [name for name, times in _soon.items() if not times]:
            del _soon[name]
    return taken


def _loop(stop: threading.Event) -> None:
    due = dict.fromkeys((job.name for job in JOBS), 0.0)
    asked: set[str] = set()  # brought forward by run_soon: run here whoever leads
    lead = leadership.of(get_database().engine)
    try:
        while True:
            turn = time.monotonic()
            leading = lead.holds()
            for job in JOBS:
                if due[job.name] <= turn:
                    if leading or job.name in asked:
                        _run_logged(job, get_database())
                    due[job.name] = turn + job.every_seconds
                    asked.discard(job.name)
            asked |= _take_soon(due)
            _wake.wait(max(0.0, min(due.values()) - time.monotonic()))
            _wake.clear()
            if stop.is_set():
                return
            asked |= _take_soon(due)
    finally:
        lead.release()


_lock = threading.Lock()
_running: tuple[threading.Thread, threading.Event] | None = None


def start() -> bool:
    """Start this process's housekeeping thread unless it runs; answers whether this call started it."""
    global _running
    with _lock:
        if _running is not None and _running[0].is_alive():
            return False
        stop = threading.Event()
        thread = threading.Thread(target=_loop, args=(stop,), name="det-housekeeping", daemon=True)
        thread.start()
        _running = (thread, stop)
        return True


def stop(timeout: float = 30.0) -> None:
    """Stop the housekeeping thread after the job it runs, if any."""
    global _running
    with _lock:
        if _running is None:
            return
        thread, event = _running
        _running = None
    event.set()
    _wake.set()
    thread.join(timeout)


@contextlib.asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    """The master app's lifespan: housekeeping runs while the app serves."""
    started = start()
    try:
        yield
    finally:
        if started:
            await asyncio.to_thread(stop)
