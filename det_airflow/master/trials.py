"""Trials: the slot protocol, each slot's runs of its trials and their exits (what the training code
reports is in master/reports.py)."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Connection, Row, and_, exists, null, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from det_airflow.api.models import SlotStatus
from det_airflow.master import (
    experiments,
    gangs,
    host_switches,
    hosts,
    identities,
    lifecycle,
    placement,
    queue,
    schema,
    search,
    tasks,
    trial_logs,
)
from det_airflow.master.airflow_bridge import TRIAL_TASK
from det_airflow.master.auth import hash_token, new_token
from det_airflow.master.db import Database
from det_airflow.master.lifecycle import NotFound, now
from det_airflow.searcher import ExitedReason
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


def update_trial(conn: Connection, trial_id: int, **values: Any) -> None:
    conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(**values))


# --- the slot protocol -------------------------------------------------------------------------


def acquire(
    conn: Connection, experiment_id: int, slot: int, task: dict[str, Any], *, dry_run: bool
) -> dict[str, Any]:
    """Give a trial slot its trial: the one it holds, else the oldest one nobody holds. Answers the
    fields of ``api.models.SlotAnswer``, with ``trial`` as its row.

    The first slot of a `det experiment create` run to ask links the run to its experiment (the
    master started its search at submission: no task runs before the trial slots).
    """
    exp = experiments.get_experiment(conn, experiment_id, lock=not dry_run)
    if task.get("run_id") and exp.dag_run_id != task["run_id"]:
        if exp.dag_run_id is not None:
            return {
                "status": SlotStatus.REFUSED,
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
        return _done(conn, experiment_id, slot)
    if state == ExperimentState.PAUSED:
        return {"status": SlotStatus.WAIT}
    trials = schema.trials
    trial = conn.execute(
        select(trials).where(
            trials.c.experiment_id == experiment_id, trials.c.slot == slot, trials.c.state.in_(_OPEN)
        )
    ).first()
    if trial is not None and trial.state == TrialState.PAUSED and trial.pause_requested:
        return {"status": SlotStatus.WAIT}  # waits at its rung until the search promotes or closes it
    if trial is not None and trial.state == TrialState.STOPPING_KILLED:
        # Killed while its run was lost (the slot asks again, so that run is over): it ends now.
        if not dry_run:
            exit_run(conn, trial.id, _LOST_EXIT_CODE)
        trial = None
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
        # A search waiting on a lost run goes on once housekeeping reclaims that run.
        return _done(conn, experiment_id, slot) if exp.search_done else {"status": SlotStatus.WAIT}
    if not _admitted(conn, exp, trial, task.get("host")):
        # The job queue has not admitted it: it defers, holding no pool slot.
        return {"status": SlotStatus.WAIT}
    placed = conn.execute(select(trials.c.host, trials.c.nodes).where(trials.c.id == trial.id)).one()
    host = placed.host
    moving = host is not None and task.get("host") not in (None, host)
    if (
        not dry_run
        and host is not None
        and (moving or placed.nodes)
        and not all(hosts.is_live(conn, h) for h in gangs.node_hosts(placed))
    ):
        # Placed on a host (or, over several, one of them) that has gone since: placed again
        # among the live ones.
        update_trial(conn, trial.id, admitted_run=trial.run_id, admitted_at=None, host=None, nodes=null())
        if not _admitted(conn, exp, get_trial(conn, trial.id), task.get("host")):
            return {"status": SlotStatus.WAIT}
        host = conn.execute(select(trials.c.host).where(trials.c.id == trial.id)).scalar()
    if host is not None and task.get("host") not in (None, host):
        # Placed on another worker host: this slot holds the trial and its task moves to that
        # host's queue (the route tells Airflow); it runs the trial there.
        if not dry_run and trial.slot != slot:
            update_trial(conn, trial.id, slot=slot)
        return {"status": SlotStatus.WAIT, "host": host, "queue": hosts.queue_of(conn, host)}
    if dry_run:
        return {"status": SlotStatus.RUN}
    token = new_token()
    lifecycle.move_trial(
        conn,
        trial,
        TrialState.STARTING,
        f"trial slot {slot} of {'/'.join(str(task.get(k)) for k in ('dag_id', 'run_id', 'task_id'))} "
        f"runs it (run {trial.run_id + 1})",
        slot=slot,
        start_time=trial.start_time or now(),
        token_hash=hash_token(token),
        run_id=trial.run_id + 1,
        task=task,
        # A Kubernetes trial runs in the cluster, not on the host of the task that submits it.
        **_ran_on(trial, (task.get("host") or host) if placement.placed_on_hosts(exp.config) else None),
    )
    trial = get_trial(conn, trial.id)
    spec = trial_spec(conn, exp, trial, task.get("host") or host)
    if (gang := gangs.start_run(conn, trial, task, task.get("port"))) is not None:
        # Larger than every host: the other nodes' tasks start their parts of the run.
        spec["gang"] = gang
    return {"status": SlotStatus.RUN, "trial": trial, "token": token, "spec": spec}


def acquire_node(
    conn: Connection, experiment_id: int, slot: int, rank: int, task: dict[str, Any], *, dry_run: bool
) -> dict[str, Any]:
    """Give a node task its part of the multi-node run of its slot's trial (master/gangs.py):
    ``run`` with that part when node ``rank`` of the run waits for it on this task's host; ``wait``
    with the host to move to when it waits on another; else ``wait`` (no run needs it now: the task
    ends, and the master starts it again when one does) or ``done`` once the slot runs no more
    trials."""
    exp = experiments.get_experiment(conn, experiment_id, lock=not dry_run)
    trials = schema.trials
    query = select(trials).where(
        trials.c.experiment_id == experiment_id, trials.c.slot == slot, trials.c.state.in_(_OPEN)
    )
    trial = conn.execute(query if dry_run else query.with_for_update()).first()
    node = gangs.waiting_node(conn, trial, rank) if trial is not None else None
    if trial is None or node is None:
        # Its run may be stopping: a node of it that waits still starts below, so the gang can stop.
        state = ExperimentState(exp.state)
        ended = state.is_terminal or state in _STOPPING or (exp.search_done and trial is None)
        return {"status": SlotStatus.DONE if ended else SlotStatus.WAIT}
    if task.get("host") != node.host:
        return {"status": SlotStatus.WAIT, "host": node.host, "queue": hosts.queue_of(conn, node.host)}
    if dry_run:
        return {"status": SlotStatus.RUN}
    token = new_token()
    gang = gangs.start_node(conn, trial, node, hash_token(token), task)
    if gang is None:
        return {"status": SlotStatus.WAIT}
    trial = get_trial(conn, trial.id)
    spec = {**trial_spec(conn, exp, trial, node.host), "gang": gang}
    return {"status": SlotStatus.RUN, "trial": trial, "token": token, "spec": spec}


def _ran_on(trial: Row, host: str | None) -> dict[str, Any]:
    """The trial's host columns for a run starting on ``host`` (nothing when hosts are not in use)."""
    if host is None:
        return {}
    seen = list(trial.hosts or [])
    return {"host": host, "hosts": seen if host in seen else [*seen, host]}


def _done(conn: Connection, experiment_id: int, slot: int) -> dict[str, Any]:
    """The slot has no trial left to run; ``ran``: the trials that ended in it (in any try of its
    task: an activation starts a new one)."""
    trials = schema.trials
    ran = conn.execute(
        select(trials.c.id)
        .where(
            trials.c.experiment_id == experiment_id,
            trials.c.slot == slot,
            trials.c.state.in_([s.value for s in TrialState if s.is_terminal]),
        )
        .order_by(trials.c.id)
    ).scalars()
    return {"status": SlotStatus.DONE, "ran": list(ran)}


def start_resumed_slots(db: Database, experiment_id: int) -> list[int]:
    """After an activation: the slots holding a paused trial that may run now start it at once, in a
    new try of their task, rather than when their trigger next looks. Answers the slots started.

    Best effort: a slot this cannot start (Airflow's table not writable, a trigger that fired first)
    resumes through its trigger as before.
    """
    from det_airflow.master import airflow_bridge

    trials = schema.trials
    with db.begin() as conn:
        exp = experiments.get_experiment(conn, experiment_id)
        if exp.dag_id is None or exp.dag_run_id is None:
            return []
        held = conn.execute(
            select(trials.c.slot).where(
                trials.c.experiment_id == experiment_id,
                trials.c.state == TrialState.PAUSED,
                trials.c.slot.is_not(None),
            )
        ).scalars()
        # Only those the job queue admits: the others would start only to defer again.
        slots = [
            s for s in held if acquire(conn, experiment_id, s, {}, dry_run=True)["status"] == SlotStatus.RUN
        ]
    if not slots:
        return []
    try:
        return airflow_bridge.start_deferred_slots_anew(exp.dag_id, exp.dag_run_id, sorted(slots))
    except airflow_bridge.AirflowRecordError as exc:
        logging.getLogger(__name__).warning("%s; the slots resume when their triggers look", exc)
        return []


def end_slots_left_waiting(db: Database) -> list[int]:
    """The housekeeping job `end slots left waiting`: the trial slots deferred waiting for a trial
    of an experiment whose slots have nothing left to run (its search is done, or it stops) start
    in a new try, which is told ``done`` and ends, rather than when their triggers next look (at
    least ``MIN_WAIT_SECONDS`` after they deferred). The DAG run, its finalize task and the
    experiment's Asset follow within moments. The requests that end a search ask for this job at
    once and a few times in the next moments: a slot told to wait just before defers only after.
    Answers the map indexes started.

    Best effort, as :func:`start_resumed_slots`: a slot this cannot start ends through its trigger.
    """
    from det_airflow.master import airflow_bridge

    try:
        deferred = airflow_bridge.deferred_slots()
    except airflow_bridge.AirflowRecordError as exc:
        logging.getLogger(__name__).warning("%s; the slots end when their triggers look", exc)
        return []
    if not deferred:
        return []
    exps = schema.experiments
    ending = [s.value for s in ExperimentState if s.is_terminal or s in _STOPPING]
    done: dict[tuple[str, str], list[int]] = {}
    with db.read() as conn:
        rows = conn.execute(
            select(exps.c.id, exps.c.dag_id, exps.c.dag_run_id).where(
                exps.c.dag_id.in_(sorted({dag_id for dag_id, _ in deferred})),
                or_(exps.c.search_done.is_(True), exps.c.state.in_(ending)),
            )
        ).all()
        for experiment_id, dag_id, run_id in rows:
            done[(dag_id, run_id)] = [
                slot
                for slot in deferred.get((dag_id, run_id), ())
                if acquire(conn, experiment_id, slot, {}, dry_run=True)["status"] == SlotStatus.DONE
            ]
    started: list[int] = []
    for (dag_id, run_id), slots in done.items():
        try:
            started += airflow_bridge.start_deferred_slots_anew(dag_id, run_id, slots)
        except airflow_bridge.AirflowRecordError as exc:
            logging.getLogger(__name__).warning("%s; the slots end when their triggers look", exc)
    return started


def route_slot(dag_id: str, run_id: str, map_index: int, queue: str, task_id: str = TRIAL_TASK) -> None:
    """Send a slot's task (or a node task) to the queue of the host its trial is placed on; best
    effort (the housekeeping job `start placed slots` sends it again once the task has deferred)."""
    from det_airflow.master import airflow_bridge

    try:
        airflow_bridge.route_slot(dag_id, run_id, map_index, queue, task_id)
    except airflow_bridge.AirflowRecordError as exc:
        logging.getLogger(__name__).warning("%s; the slot starts on its host when housekeeping looks", exc)


def unroute_slot(dag_id: str, run_id: str, map_index: int, task_id: str = TRIAL_TASK) -> None:
    """A slot's task (or a node task) runs its trial on the host it was sent to: its later tries go
    to the default queue (``airflow_bridge.unroute_slot``); best effort (a retry left on a gone
    host's queue is sent back by the job `requeue from gone hosts` once it is up for retry)."""
    from det_airflow.master import airflow_bridge

    try:
        airflow_bridge.unroute_slot(dag_id, run_id, map_index, task_id)
    except airflow_bridge.AirflowRecordError as exc:
        logging.getLogger(__name__).warning("%s; its retries stay on its host's queue", exc)


def start_nodes(db: Database, trial_id: int | None = None) -> list[tuple[int, int]]:
    """Start, each on its host's queue, the node tasks of the multi-node runs whose nodes wait for
    them (``trial_id``'s alone, when given): a new try of each task that is not running (node tasks
    end whenever no run needs them). Best effort, also a housekeeping job; answers the (trial,
    rank) pairs started."""
    from det_airflow.master import airflow_bridge

    with db.read() as conn:
        waiting = gangs.nodes_to_start(conn, trial_id)
        queues = {host: hosts.queue_of(conn, host) for host in {node.host for node in waiting}}
    by_run: dict[tuple[str, str], dict[int, tuple[int, int, str | None]]] = {}
    for node in waiting:
        gang = sum(int(n["slots"]) for n in node.placed or ())
        index = placement.node_map_index(node.slot, node.rank, gang)
        by_run.setdefault((node.dag_id, node.dag_run_id), {})[index] = (
            node.trial_id,
            node.rank,
            queues[node.host],
        )
    started: list[tuple[int, int]] = []
    for (dag_id, run_id), indexes in by_run.items():
        routes = {index: queue for index, (_, _, queue) in indexes.items() if queue}
        try:
            done = airflow_bridge.start_node_tasks(dag_id, run_id, sorted(indexes), routes)
        except airflow_bridge.AirflowRecordError as exc:
            logging.getLogger(__name__).warning("%s; the nodes start at the next look", exc)
            continue
        started += [indexes[index][:2] for index in done]
    return started


def start_placed_slots(db: Database) -> list[int]:
    """Start at once, on their hosts' queues, the slots holding a trial placed on another host
    (their tasks deferred after being told so), rather than when their triggers next look.
    Answers the trials whose slots were started."""
    from det_airflow.master import airflow_bridge

    trials, exps = schema.trials, schema.experiments
    with db.read() as conn:
        rows = conn.execute(
            select(trials.c.id, trials.c.slot, exps.c.dag_id, exps.c.dag_run_id, schema.hosts.c.queue)
            .join(exps, exps.c.id == trials.c.experiment_id)
            .join(schema.hosts, schema.hosts.c.id == trials.c.host)
            .where(
                trials.c.state == TrialState.QUEUED,
                trials.c.slot.is_not(None),
                trials.c.admitted_run > trials.c.run_id,
                exps.c.state == ExperimentState.ACTIVE,
                exps.c.dag_run_id.is_not(None),
            )
        ).all()
    by_run: dict[tuple[str, str], dict[int, tuple[int, str]]] = {}
    for row in rows:
        by_run.setdefault((row.dag_id, row.dag_run_id), {})[row.slot] = (row.id, row.queue)
    started: list[int] = []
    for (dag_id, run_id), slots in by_run.items():
        queues = {slot: queue for slot, (_, queue) in slots.items()}
        try:
            done = airflow_bridge.start_deferred_slots_anew(dag_id, run_id, sorted(slots), queues)
        except airflow_bridge.AirflowRecordError as exc:
            logging.getLogger(__name__).warning("%s; placed slots start when their triggers look", exc)
            continue
        started += [slots[slot][0] for slot in done]
    return started


def start_waiting_slots(db: Database) -> list[int]:
    """While worker hosts report: admit the waiting trials the job queue and the hosts have room
    for, each into a slot of its experiment that waits for a trial, and send that slot at once to
    the host the trial is placed on, rather than when its trigger next looks and wherever Celery
    sends it:

    - a slot whose task has not started yet (most often waiting for its Airflow pool behind the
      tasks of trials ending) is sent to the host's queue; it starts there and runs the trial,
      instead of starting only to defer;
    - a slot whose task is deferred is started in a new try on the host's queue, as an activation
      does.

    Slots that a trial's end frees are taken again within moments, and the trial starts where it
    was placed, without a move. Answers the trials sent this way."""
    from det_airflow.master import airflow_bridge

    trials, exps = schema.trials, schema.experiments
    unheld = and_(
        trials.c.experiment_id == exps.c.id,
        trials.c.state == TrialState.QUEUED,
        trials.c.slot.is_(None),
        trials.c.pause_requested.is_(False),
    )
    with db.read() as conn:
        if not hosts.live_hosts(conn):
            return []
        waiting = conn.execute(
            select(exps.c.id, exps.c.dag_id, exps.c.dag_run_id)
            .where(exps.c.state == ExperimentState.ACTIVE, exps.c.dag_id.is_not(None), exists().where(unheld))
            .order_by(exps.c.id)
        ).all()
    started: list[int] = []
    try:
        # Before any of its slots asked, a `det experiment create` run is its DAG's only one.
        runs = airflow_bridge.slots_waiting_for_trials({dag_id: run_id for _, dag_id, run_id in waiting})
    except airflow_bridge.AirflowRecordError as exc:
        logging.getLogger(__name__).warning("%s; waiting slots start when their triggers look", exc)
        return []
    for experiment_id, dag_id, _ in waiting:
        if dag_id not in runs:
            continue
        run_id, slots = runs[dag_id]
        try:
            # Slots that will start anyway go first: a deferred one needs a new try.
            with db.begin() as conn:
                placed = _place_in_slots(conn, experiment_id, [*slots.unstarted, *slots.deferred])
            if placed:
                queues = {slot: queue_name for slot, (_, queue_name) in placed.items()}
                done = airflow_bridge.route_unstarted_slots(
                    dag_id, run_id, {slot: queues[slot] for slot in slots.unstarted if slot in queues}
                )
                deferred = sorted(slot for slot in placed if slot in slots.deferred)
                done += airflow_bridge.start_deferred_slots_anew(dag_id, run_id, deferred, queues)
                started += [placed[slot][0] for slot in done]
        except airflow_bridge.AirflowRecordError as exc:
            # A slot given its trial but not sent asks for it when it starts or its trigger fires.
            logging.getLogger(__name__).warning("%s; waiting slots start when their triggers look", exc)
    return started


def place_first_trials(db: Database, experiment_id: int, slots: int) -> dict[int, str]:
    """While worker hosts report: give a `det experiment create` experiment's trial slots (map
    indexes ``0 .. slots - 1``) its first trials that the job queue admits onto hosts, before its
    run exists; answers the queue of each one's host by slot, where the master sends the slot's
    task as it starts the run (``airflow_bridge.publish_experiment_dag``). The first tries then
    start where their trials run, as later slots do (:func:`start_waiting_slots`). Nothing while no
    host reports (the LocalExecutor's one machine): slots ask for their trials when they start.
    Best effort, after the experiment is committed: on a database error it logs why and gives none
    (each slot asks for its trial when it starts, wherever Celery sends it)."""
    try:
        with db.read() as conn:
            if not hosts.live_hosts(conn):
                return {}
        with db.begin() as conn:
            placed = _place_in_slots(conn, experiment_id, list(range(slots)))
    except SQLAlchemyError:
        logging.getLogger(__name__).warning(
            "could not give experiment %d's slots their first trials now; they ask when they start",
            experiment_id,
            exc_info=True,
        )
        return {}
    return {slot: queue_name for slot, (_, queue_name) in placed.items()}


def give_slot_its_next_trial(conn: Connection, trial: Row) -> None:
    """A trial placed on a worker host ended in its slot, and the slot goes on: in the same
    transaction, the slot is given its experiment's next waiting trial, when the job queue admits
    it, placed on that host between equally good ones. Otherwise another slot asking in between
    could be placed on the host's freed slots (best fit), this slot's next trial elsewhere, and both
    tasks would move (when trials end together, as a search's first trials do, their slots swapped
    hosts). A trial that ended in ERROR fails its slot's task: the slot takes none, and the next
    trial stays free for the other slots."""
    if trial.slot is None or trial.host is None:
        return
    if TrialState(trial.state) not in (TrialState.COMPLETED, TrialState.CANCELED):
        return
    _place_in_slots(conn, trial.experiment_id, [trial.slot], prefer_host=trial.host)


def _place_in_slots(
    conn: Connection, experiment_id: int, slots: list[int], prefer_host: str | None = None
) -> dict[int, tuple[int, str]]:
    """Give each of ``slots`` holding no trial the experiment's next waiting trial, while the job
    queue admits it onto a host (``prefer_host`` between equally good ones): slot -> (trial id, the
    queue of its host)."""
    trials = schema.trials
    exp = experiments.get_experiment(conn, experiment_id, lock=True)
    if exp.state != ExperimentState.ACTIVE:
        return {}
    held = set(
        conn.execute(
            select(trials.c.slot).where(
                trials.c.experiment_id == experiment_id, trials.c.slot.is_not(None), trials.c.state.in_(_OPEN)
            )
        ).scalars()
    )
    placed: dict[int, tuple[int, str]] = {}
    for slot in (s for s in slots if s not in held):
        trial = conn.execute(
            select(trials)
            .where(
                trials.c.experiment_id == experiment_id,
                trials.c.slot.is_(None),
                trials.c.state == TrialState.QUEUED,
                trials.c.pause_requested.is_(False),
            )
            .order_by(trials.c.id)
            .limit(1)
        ).first()
        if trial is None or not queue.admit(conn, exp, trial, prefer_host):
            break
        host = conn.execute(select(trials.c.host).where(trials.c.id == trial.id)).scalar()
        queue_name = hosts.queue_of(conn, host) if host is not None else None
        if queue_name is None:
            break  # admitted without a host (none live now): its slot asks when its trigger fires
        update_trial(conn, trial.id, slot=slot)
        placed[slot] = (trial.id, queue_name)
    return placed


def requeue_from_gone_hosts(db: Database) -> int:
    """Trial tasks waiting on the queue of a host whose heartbeat stopped go back to the default
    queue, so that a live worker runs them; answers how many. Costs no Airflow query while no
    host reports."""
    from det_airflow import settings
    from det_airflow.master import airflow_bridge

    with db.read() as conn:
        if not hosts.all_hosts(conn):
            return 0
        live = {row.queue for row in hosts.live_hosts(conn)}
    try:
        return airflow_bridge.requeue_trial_tasks(live, settings.host_queue(""))
    except airflow_bridge.AirflowRecordError as exc:
        logging.getLogger(__name__).warning("%s; looking again at the next turn", exc)
        return 0


def _admitted(conn: Connection, exp: Row, trial: Row, host: str | None = None) -> bool:
    """Ask the queue (placing the trial, ``host`` first between equally good hosts); when it says
    no, preempt lower-priority trials and ask again (a preempted trial that had not started frees
    its slots at once). Slots held by lost runs are freed by housekeeping
    (master/housekeeping.py), not here."""
    if queue.admit(conn, exp, trial, host):
        return True
    return bool(_preempt_for_waiting(conn, exp.resource_pool)) and queue.admit(conn, exp, trial, host)


def _preempt_for_waiting(conn: Connection, pool: str) -> dict[int, int]:
    """Make room for waiting higher-priority jobs, telling each preempted trial why in its logs."""
    chosen = queue.preempt_for_waiting(conn, pool)
    for trial_id, job_id in chosen.items():
        trial_logs.append_logs(
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


def preempt_for_waiting_jobs(db: Database) -> dict[int, int]:
    """Make room for the waiting jobs of every pool that preempts; returns trial id -> the job it
    makes room for.

    This does not wait for a waiting trial to ask: its task may not even start while the trials it
    should preempt fill its Airflow pool.
    """
    if not queue.preemption_anywhere():
        return {}  # the default: no query
    exps = schema.experiments
    with db.read() as conn:
        pools = conn.execute(
            select(exps.c.resource_pool)
            .distinct()
            .where(
                exps.c.dag_id.is_not(None),  # unmanaged experiments hold no pool slots
                exps.c.state.not_in([s.value for s in ExperimentState if s.is_terminal]),
            )
        ).scalars()
        pools_in_use = sorted(pools)
    chosen: dict[int, int] = {}
    for pool in pools_in_use:
        if not queue.preemption_enabled(pool):
            continue
        with db.read() as conn:  # a look first: on SQLite a write transaction blocks every other
            due = queue.preemptions_due(conn, pool)
        if due:
            with db.begin() as conn:  # chosen again under the pool's lock
                chosen.update(_preempt_for_waiting(conn, pool))
    return chosen


def make_room_for_submitted(db: Database, experiment_id: int, pool: str) -> None:
    """A job was just submitted to ``pool``: preempt for it now, as part of its admission, rather
    than at the next turn of :func:`preempt_for_waiting_jobs`. Best effort, after its creation is
    committed: that job preempts for it all the same."""
    try:
        if not queue.preemption_enabled(pool):
            return
        with db.begin() as conn:
            _preempt_for_waiting(conn, pool)
    except (queue.QueueConfigError, SQLAlchemyError) as exc:
        logging.getLogger(__name__).error("preempting for experiment %s: %s", experiment_id, exc)


def preemption_answer(db: Database, trial_id: int) -> bool:
    """A running trial's question (each look of its long poll): should it stop? One read; a run
    told to stop is marked so (see :func:`exit_run`)."""
    with db.read() as conn:
        row = _stop_row(conn, trial_id)
    stop = _asked_to_stop(row)
    if stop and row.told_to_stop_run != row.run_id:
        with db.begin() as conn:
            conn.execute(
                update(schema.trials)
                .where(schema.trials.c.id == trial_id, schema.trials.c.run_id == row.run_id)
                .values(told_to_stop_run=row.run_id)
            )
    return stop


# A run's states from its acquisition until it ends or is killed.
_RUN_STARTED = [TrialState.PULLING, TrialState.STARTING, TrialState.RUNNING, TrialState.STOPPING_KILLED]
# What a slot's runner reports of the run it started, and what the trial's own reports imply.
RUN_PHASES = (TrialState.PULLING, TrialState.STARTING, TrialState.RUNNING)


def report_phase(conn: Connection, trial_id: int, run_id: int, to: TrialState, reason: str) -> Row:
    """The runner of run ``run_id`` says where its start is: pulling the image, starting, running.

    Only a run that is still starting moves: a stale report (an earlier run's, or one that arrives
    after a pause, a kill or the trial's end) changes nothing. Answers the trial as it now is.
    """
    if to not in RUN_PHASES:
        raise ValueError(f"{to} is not a phase of a run's start")
    trial = get_trial(conn, trial_id, lock=True)
    if (
        trial.run_id == run_id
        and trial.state in (TrialState.PULLING, TrialState.STARTING)
        and trial.state != to
    ):
        lifecycle.move_trial(conn, trial, to, reason)
        trial = get_trial(conn, trial_id)
    return trial


def mark_running(conn: Connection, trial: Row, why: str) -> Row:
    """A report from the trial's process proves its run started (a runner that cannot tell, such
    as pods watched from the triggerer, leaves it STARTING until then). Answers the trial as it
    now is."""
    if trial.state not in (TrialState.PULLING, TrialState.STARTING):
        return trial
    lifecycle.move_trial(conn, trial, TrialState.RUNNING, why)
    return get_trial(conn, trial.id)


# Task instance states in which the task no longer runs the trial it last acquired.
_TASK_ENDED = {"success", "failed", "skipped", "upstream_failed", "removed"}
# ...and those of a task instance cleared through Airflow's API or UI while it ran the trial.
_TASK_CLEARED = {None, "restarting"}


def reclaim_lost_runs(db: Database) -> list[int]:
    """Close the runs whose Airflow task ended without reporting the trial's exit, one pool at a
    time; returns their trial ids.

    A worker that dies, or a task that fails while the API server is away, leaves its trial
    RUNNING and holding pool slots, so the trials queued behind it and a search waiting for its
    result would wait forever. So does a task instance someone failed, cleared or deleted through
    Airflow's own API or UI. Such a run ends as a failed run: the trial restarts from its latest
    checkpoint in whichever slot is free (within max_restarts), else ends ERROR.
    """
    trials, exps = schema.trials, schema.experiments
    with db.read() as conn:
        pools = conn.execute(
            select(exps.c.resource_pool)
            .distinct()
            .join(trials, trials.c.experiment_id == exps.c.id)
            .where(trials.c.state.in_(_RUN_STARTED), trials.c.task.is_not(None))
        ).scalars()
        pools_with_runs = sorted(pools)
    lost: list[int] = []
    for pool in pools_with_runs:
        # Airflow is asked outside the write lock, which every request that changes det's tables
        # takes on SQLite: a look that finds nothing lost (nearly every look) blocks no one.
        with db.read() as conn:
            found = _lost_runs(conn, exps.c.resource_pool == pool)
        if found:
            with db.begin() as conn:
                lost += _close_lost_runs(conn, found)
    return lost


def _lost_runs(conn: Connection, which: Any) -> dict[int, tuple[dict[str, Any], str]]:
    """The started runs of the trials ``which`` selects whose Airflow task ended, was cleared or is
    gone without reporting the trial's exit: trial id → (the task that acquired it, what happened)."""
    from det_airflow.master import airflow_bridge

    trials, exps = schema.trials, schema.experiments
    rows = conn.execute(
        select(trials.c.id, trials.c.task, trials.c.host, trials.c.nodes)
        .join(exps, exps.c.id == trials.c.experiment_id)
        .where(which, trials.c.state.in_(_RUN_STARTED), trials.c.task.is_not(None))
    ).all()
    found = {}
    gone = hosts.gone_hosts(conn)
    for row in rows:
        for host in gangs.node_hosts(row):
            if host in gone:
                # Its host (or one of its nodes') stopped heartbeating: the run died with it,
                # whatever Airflow still shows.
                found[int(row.id)] = (row.task, f"its host {host} stopped heartbeating ({gone[host]})")
                break
    # (trial id, a task instance's key, the try that started it, whose task: its own or a node's)
    runs: list[tuple[int, tuple[str, str, str, int], int, str]] = []
    for trial_id, task, _, _ in rows:
        if trial_id not in found and (key := _task_key(task)) is not None:
            runs.append((int(trial_id), key, int(task.get("try_number", 1)), "its task"))
    for node in gangs.running_nodes(conn, [int(row.id) for row in rows if row.nodes and row.id not in found]):
        if (key := _task_key(node.task)) is not None:
            runs.append(
                (int(node.trial_id), key, int(node.task.get("try_number", 1)), f"its node {node.rank}'s task")
            )
    if not runs:
        return found
    try:
        states = airflow_bridge.task_instance_states(sorted({key for _, key, _, _ in runs}))
    except airflow_bridge.AirflowRecordError:
        return found  # logged; the next look tries again
    tasks = {int(row.id): row.task for row in rows}
    for trial_id, key, acquired_by, whose in runs:
        if trial_id in found:
            continue
        name = "/".join(map(str, key))
        if key not in states:
            what = f"{whose} {name} is gone from Airflow (deleted through its API or UI, with its DAG run or DAG)"
        else:
            state, try_number = states[key]
            if try_number != acquired_by:
                continue  # a newer try takes the trial back in its slot
            if state in _TASK_ENDED:
                what = (
                    f"{whose} {name} ended {state} without reporting the trial's exit (a lost worker "
                    "or API server, or someone set its state through Airflow's API or UI)"
                )
            elif state in _TASK_CLEARED:
                what = f"{whose} {name} was cleared through Airflow's API or UI while it ran the trial"
            else:
                continue  # still running it
        found[trial_id] = (tasks[trial_id], what)
    return found


def _task_key(task: dict[str, Any] | None) -> tuple[str, str, str, int] | None:
    """The task instance a recorded task names, when it names one."""
    if task is None or any(task.get(k) is None for k in ("dag_id", "run_id", "task_id", "map_index")):
        return None
    return (task["dag_id"], task["run_id"], task["task_id"], int(task["map_index"]))


def _close_lost_runs(conn: Connection, found: dict[int, tuple[dict[str, Any], str]]) -> list[int]:
    """End the runs :func:`_lost_runs` found as failed runs, in a write transaction; a run that
    reported its exit, or that a newer try acquired, since the look is left alone."""
    lost = []
    for trial_id, (task, what) in found.items():
        now = conn.execute(
            select(schema.trials.c.state, schema.trials.c.task)
            .where(schema.trials.c.id == trial_id)
            .with_for_update()
        ).first()
        if now is None or now.state not in _RUN_STARTED or now.task != task:
            continue  # deleted, exited or acquired again since the look
        trial, _ = exit_run(conn, trial_id, _LOST_EXIT_CODE)
        if trial.state == TrialState.QUEUED:
            update_trial(conn, trial_id, slot=None)  # no try of that task will come for it: any free slot
        trial_logs.append_logs(
            conn, trial_id, [{"level": "ERROR", "message": f"{what}; the trial is now {trial.state}"}]
        )
        lost.append(trial_id)
    return lost


def end_experiments_ended_in_airflow(db: Database) -> list[int]:
    """End the experiments whose DAG run someone deleted or ended through Airflow's own API or UI
    while the experiment was still going: they end ERROR, naming what happened, and so do their open
    trials. Returns their ids."""
    from det_airflow.master import airflow_bridge

    exps = schema.experiments
    with db.read() as conn:
        rows = conn.execute(
            select(exps.c.id, exps.c.dag_id, exps.c.dag_run_id).where(
                exps.c.dag_id.is_not(None),
                exps.c.dag_run_id.is_not(None),
                exps.c.state.not_in([s.value for s in ExperimentState if s.is_terminal]),
            )
        ).all()
    runs = [(r.dag_id, r.dag_run_id) for r in rows]
    existing = airflow_bridge.existing_dag_runs(runs)
    finished = airflow_bridge.finished_dag_runs(sorted(existing))
    ended = []
    for r in rows:
        if (r.dag_id, r.dag_run_id) not in existing:
            why = f"its DAG run '{r.dag_run_id}' is gone from Airflow (deleted through its API or UI)"
        elif (r.dag_id, r.dag_run_id) in finished:
            why = f"its DAG run '{r.dag_run_id}' was ended in Airflow before the experiment ended"
        else:
            continue
        with db.begin() as conn:
            experiments.finalize(conn, r.id, why=why)  # no change if it ended meanwhile
        ended.append(int(r.id))
    return ended


_LOST_EXIT_CODE = -1


def trial_spec(conn: Connection, exp: Row, trial: Row, host: str | None = None) -> dict[str, Any]:
    """Everything the trial process needs (det_airflow.trial_process.TrialSpec), starting on
    ``host`` (its devices an admin disabled are not leased)."""
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
        # The OS identity of the experiment's owner: runners run the trial as it (gid == uid).
        "uid": (uid := identities.uid_for(conn, exp.owner)),
        "gid": uid,
        "disabled_devices": [] if host is None else host_switches.disabled_devices(conn, host),
    }


def may_read_checkpoint(conn: Connection, trial_id: int, checkpoint: Row) -> bool:
    """Whether a trial's code may read ``checkpoint``'s record: one of an experiment of the same
    owner, or the checkpoint its own experiment declared to warm-start from."""
    exp = experiments.get_experiment(conn, get_trial(conn, trial_id).experiment_id)
    source = experiments.get_experiment(conn, checkpoint.experiment_id)
    if source.owner == exp.owner:
        return True
    return checkpoint.uuid == _warm_start_checkpoint(conn, experiments.experiment_config(exp))


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
    if TrialState(trial.state).is_terminal or trial.state in (TrialState.QUEUED, TrialState.PAUSED):
        return trial, False  # its run has been closed already (a lost run reclaimed, a repeated report)
    gangs.end_tokens(conn, trial_id)  # the other nodes of a run over several hosts end with it
    tasks.run_ended(conn, exp.id, exit_code)  # a task's server is gone with its process
    cfg = experiments.experiment_config(exp)
    exp_state = ExperimentState(exp.state)
    event = None
    exited = "its run was lost" if exit_code == _LOST_EXIT_CODE else f"its process exited {exit_code}"
    values: dict[str, Any] = {"token_hash": None}
    preempted = trial.preempt_requested_at is not None
    if preempted:
        values["preempt_requested_at"] = None
    if trial.state == TrialState.STOPPING_KILLED:  # `det trial kill`: whatever the exit, no retry
        state, event = TrialState.CANCELED, ExitedReason.USER_CANCELED
        reason = f"killed; {exited}"
    elif trial.early_exit == "INVALID_HP":
        state, event = TrialState.COMPLETED, ExitedReason.INVALID_HP
        reason = f"it reported invalid hyperparameters; {exited}"
    elif (
        preempted
        and exp_state == ExperimentState.ACTIVE
        and not (trial.stop_requested or trial.pause_requested)
    ):
        # Preempted by the queue: back to waiting, resumed from its checkpoint once admitted again.
        # Whatever the exit (one that ignored the signal was killed), it counts no restart.
        nodes = [trial.host, *(node["host"] for node in trial.nodes or ())]
        why = host_switches.preemption_cause(conn, nodes) or "preempted by the job queue"
        lifecycle.move_trial(conn, trial, TrialState.QUEUED, f"{why}; {exited}", **values)
        return get_trial(conn, trial_id), False
    elif not trial.stop_requested and (
        exp_state == ExperimentState.PAUSED or (exit_code == 0 and trial.pause_requested)
    ):
        # Preempted by a pause. The experiment's: whatever the exit (a trial that ignored the pause
        # past preemption_timeout was killed) it counts no restart, keeps its slot and resumes from
        # its latest checkpoint once the experiment is active. The search's, at a rung: its slot goes
        # on to other trials, and whichever slot is free resumes it once the search promotes it.
        at_rung = exp_state == ExperimentState.ACTIVE
        lifecycle.move_trial(
            conn,
            trial,
            TrialState.PAUSED,
            f"{'the search paused it at its rung' if at_rung else 'its experiment was paused'}; {exited}",
            slot=None if at_rung else trial.slot,
            **values,
        )
        return get_trial(conn, trial_id), False
    elif (
        trial.told_to_stop_run == trial.run_id
        and exp_state == ExperimentState.ACTIVE
        and not trial.stop_requested
    ):
        # The master asked this run to stop (its experiment was paused) and the experiment was
        # activated again before the run exited: it stopped as asked, so it resumes from its latest
        # checkpoint like a paused trial, rather than counting as having finished its work.
        lifecycle.move_trial(
            conn,
            trial,
            TrialState.QUEUED,
            f"it stopped as asked, and its experiment is active again; {exited}",
            **values,
        )
        return get_trial(conn, trial_id), False
    elif exit_code == 0:
        if exp_state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
            state, event = TrialState.CANCELED, ExitedReason.USER_CANCELED
            reason = f"its experiment was stopped; {exited}"
        elif trial.early_exit == "USER_REQUESTED_STOP":
            state, event = TrialState.COMPLETED, ExitedReason.USER_CANCELED
            reason = f"it asked to stop; {exited}"
        else:
            state, reason = TrialState.COMPLETED, exited
    else:
        restarts = values["restarts"] = trial.restarts + 1
        if restarts > cfg.max_restarts or exp_state.is_terminal or exp_state in _STOPPING:
            state, event = TrialState.ERROR, ExitedReason.ERRORED
            reason = f"{exited}; restart {restarts} is past max_restarts {cfg.max_restarts}"
            if exp_state.is_terminal or exp_state in _STOPPING:
                reason = f"{exited} while its experiment is {exp_state}"
        else:
            reason = f"{exited}; restart {restarts} of max_restarts {cfg.max_restarts}"
            lifecycle.move_trial(conn, trial, TrialState.QUEUED, reason, **values)
            return get_trial(conn, trial_id), True
    lifecycle.move_trial(conn, trial, state, reason, end_time=now(), **values)
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
        lifecycle.move_trial(
            conn,
            trial,
            TrialState.CANCELED,
            "det trial kill",
            stop_requested=True,
            end_time=now(),
            token_hash=None,
        )
        search.send(
            conn,
            trial.experiment_id,
            lambda m: m.trial_exited_early(trial.request_id, ExitedReason.USER_CANCELED),
        )
        experiments.maybe_finish(conn, trial.experiment_id)
    else:
        lifecycle.move_trial(conn, trial, TrialState.STOPPING_KILLED, "det trial kill", stop_requested=True)
    return get_trial(conn, trial_id)


def should_preempt(conn: Connection, trial_id: int) -> bool:
    return _asked_to_stop(_stop_row(conn, trial_id))


def _stop_row(conn: Connection, trial_id: int) -> Row:
    """What says whether the trial should stop, and its pool: one read."""
    trials, exps = schema.trials, schema.experiments
    row = conn.execute(
        select(
            trials.c.stop_requested,
            trials.c.pause_requested,
            trials.c.preempt_requested_at,
            trials.c.run_id,
            trials.c.told_to_stop_run,
            exps.c.state,
            exps.c.resource_pool,
        )
        .join(exps, exps.c.id == trials.c.experiment_id)
        .where(trials.c.id == trial_id)
    ).first()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    return row


def _asked_to_stop(row: Row) -> bool:
    return (
        bool(row.stop_requested or row.pause_requested)
        or row.preempt_requested_at is not None
        or ExperimentState(row.state) != ExperimentState.ACTIVE
    )
