"""The only place the master reads or changes Airflow's own configuration and tables.

The master runs inside Airflow's API server, which has a database session; task code does not.
The non-public Airflow names used here come from `det_airflow.airflow_compat`, which says why each.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from det_airflow import settings
from det_airflow.config import priority_weight
from det_airflow.errors import DetError

# The file Airflow parses; every experiment YAML becomes a DAG through it.
FACTORY_FILE = "det_experiments.py"
DEFAULT_BUNDLE = "dags-folder"
# Every experiment DAG is written as a DAG of the one factory file: two submissions writing theirs
# at the same moment race in Airflow's sync of that file's DAGs (one run was seen made without its
# DAG's version and ended at once). They take turns: in this process by a lock, across API server
# processes on PostgreSQL by a transaction-scoped advisory lock (the key spells "det-dags").
_PUBLISHING = threading.Lock()
_PUBLISH_LOCK_KEY = 0x6465742D64616773


def dags_folder() -> Path:
    from airflow.sdk import conf

    return Path(conf.get("core", "dags_folder")).expanduser()


def master_url() -> str:
    """The address trials and tasks use to reach the master."""
    from airflow.sdk import conf

    explicit = settings.load().master_url
    if explicit:
        return explicit.rstrip("/")
    base = conf.get("api", "base_url", fallback=None)
    if base:
        return base.rstrip("/")
    host = conf.get("api", "host", fallback="127.0.0.1")
    port = conf.get("api", "port", fallback="8080")
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"


def pool_slots(name: str) -> int | None:
    """Slots of an Airflow pool (-1 = unlimited), or None when it does not exist."""
    from det_airflow.airflow_compat import Pool, create_session

    with create_session() as session:
        pool = Pool.get_pool(name, session=session)
        return None if pool is None else int(pool.slots)


def request_reparse() -> None:
    """Ask the DAG processor to parse the experiment factory now rather than at its next interval.

    Best effort, called after the experiment is committed: the factory is parsed at its next
    interval anyway, so a failure is logged and never turns a stored experiment into an error.
    """
    import logging

    from sqlalchemy.exc import IntegrityError, SQLAlchemyError

    from det_airflow.airflow_compat import DagPriorityParsingRequest, create_session

    try:
        with create_session() as session:
            session.merge(
                DagPriorityParsingRequest(bundle_name=DEFAULT_BUNDLE, relative_fileloc=FACTORY_FILE)
            )
    except IntegrityError:
        pass  # a concurrent create inserted the same request (its id is the file's hash) first
    except SQLAlchemyError:
        logging.getLogger(__name__).warning(
            "could not ask Airflow to parse %s now; it will at its next interval", FACTORY_FILE, exc_info=True
        )


@dataclass(frozen=True)
class Published:
    """What :func:`publish_experiment_dag` did: wrote the DAG, and started its run (its id)."""

    dag: bool
    run_id: str | None = None


def publish_experiment_dag(
    experiment_id: int, source: Path | None = None, queues: dict[int, str] | None = None
) -> Published:
    """Write a submitted experiment's DAG into Airflow's tables now, as the DAG processor writes it
    when it next parses the factory, and start its one run (:func:`_start_experiment_run`).

    The DAG processor would find it within about two of its one-second loops, plus the parse; this
    takes a few hundredths of a second. Its later parse writes the same DAG, so no second DAG
    version is made. Best effort, after the experiment is committed: on any failure it logs why and
    answers that it wrote nothing, and the caller asks for a parse (which reports a config it cannot build, as for
    every YAML). ``source``: the experiment's staged file, not yet where parses look.
    ``queues``: see :func:`_start_experiment_run`.
    """
    import logging

    from det_airflow.airflow_compat import DagBag, create_session, sync_bag_to_db
    from det_airflow.dagfactory import build_submitted_dag

    folder = dags_folder()
    factory = folder / FACTORY_FILE
    try:
        if not factory.is_file():
            raise DetError(f"{factory}: no such file")
        dag = build_submitted_dag(folder, experiment_id, source)
        # The DAG processor names the factory as the DAG's file; the DAG must be the same.
        dag.fileloc = str(factory)
        dag.relative_fileloc = FACTORY_FILE
        dag.validate()
        bag = DagBag(dag_folder=factory, collect_dags=False, bundle_path=folder, bundle_name=DEFAULT_BUNDLE)
        bag.bag_dag(dag)  # cycle check and the cluster's DAG and task policies, as on a parse
        with _PUBLISHING, create_session() as session:
            if session.get_bind().dialect.name == "postgresql":
                from sqlalchemy import text

                session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PUBLISH_LOCK_KEY})
            sync_bag_to_db(bag, DEFAULT_BUNDLE, None, session=session)
            run_id = _start_experiment_run(session, dag.dag_id, queues or {})
        forget_cached_logins()  # under FAB the owner's role now edits the DAG: holds at once
    except Exception:  # noqa: BLE001 - the parse does the same work a moment later
        logging.getLogger(__name__).warning(
            "could not write experiment %d's DAG to Airflow now; asking for a parse",
            experiment_id,
            exc_info=True,
        )
        return Published(dag=False)
    return Published(dag=True, run_id=run_id)


def experiment_run_id(dag_id: str) -> str:
    """The run id of a `det experiment create` DAG's one run: the master makes exactly this run, so
    a second attempt (the housekeeping job after a failed start, another API server) meets the
    first instead of making a second."""
    return f"det__{dag_id.removeprefix('det_')}"


def _start_experiment_run(session: Any, dag_id: str, queues: dict[int, str]) -> str | None:
    """Start the one run of a just-written `det experiment create` DAG, in the transaction that
    writes the DAG, through Airflow's own trigger path (what `POST /api/v2/dags/{dag_id}/dagRuns`
    does). The DAG has no schedule, so the scheduler never makes a run of its own: nothing races
    this one (a `@once` DAG's run made here and by the scheduler at once stopped the scheduler with
    a duplicate key). Answers the run's id if it started it; a DAG that has a run is left alone.

    Before the scheduler can see the run, each trial slot that ``queues`` names (map index -> the
    queue of the host its first trial is placed on) is sent to that queue: the first tries start
    where their trials run instead of wherever Celery sends them, only to move.

    Best effort, in a savepoint: on a failure the DAG is still written, and housekeeping's
    ``start experiment runs`` job starts the run (slots given trials then move when they ask)."""
    import logging

    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    from det_airflow.airflow_compat import DagRun, DagRunTriggeredByType, DagRunType, SerializedDagModel

    try:
        with session.begin_nested():
            if session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id).limit(1)) is not None:
                return None
            dag = SerializedDagModel.get_dag(dag_id, session=session)
            if dag is None:
                return None
            # What Airflow's trigger does for a run without a logical date; its own function checks
            # for a duplicate through a session of its own, which would commit this transaction.
            run = dag.create_dagrun(
                run_id=experiment_run_id(dag_id),
                logical_date=None,
                data_interval=None,
                run_after=datetime.now(UTC),
                run_type=DagRunType.MANUAL,
                triggered_by=DagRunTriggeredByType.REST_API,
                state=DagRunState.QUEUED,
                session=session,
            )
            session.flush()
            route_unstarted_slots(dag_id, run.run_id, queues, session=session)
    except Exception:  # noqa: BLE001 - housekeeping starts the run a moment later
        logging.getLogger(__name__).warning(
            "could not start DAG %s's run now; housekeeping will", dag_id, exc_info=True
        )
        return None
    return str(run.run_id)


def start_missing_runs(dag_ids: list[str]) -> list[str]:
    """Start the run of each of these `det experiment create` DAGs that Airflow holds without any
    run (its start failed as the DAG was written, or the DAG came from a parse); answers the DAG ids
    started."""
    if not dag_ids:
        return []
    from sqlalchemy import select

    from det_airflow.airflow_compat import DagModel, DagRun, create_session

    with create_session() as session:
        known = set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))))
        with_runs = set(session.scalars(select(DagRun.dag_id).where(DagRun.dag_id.in_(known)).distinct()))
        missing = sorted(known - with_runs)
    started = []
    for dag_id in missing:
        with _PUBLISHING, create_session() as session:
            if session.get_bind().dialect.name == "postgresql":
                from sqlalchemy import text

                session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PUBLISH_LOCK_KEY})
            if _start_experiment_run(session, dag_id, {}) is not None:
                started.append(dag_id)
    return started


class AirflowRecordError(DetError):
    """Airflow would not let go of a DAG or DAG run (reported by `det e delete`)."""


def running_dag_runs(dag_id: str, run_id: str | None = None) -> list[str]:
    """Run ids of the DAG's runs that are still running (only `run_id`'s, when given)."""
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    from det_airflow.airflow_compat import DagRun, create_session

    query = select(DagRun.run_id).where(DagRun.dag_id == dag_id, DagRun.state == DagRunState.RUNNING)
    if run_id is not None:
        query = query.where(DagRun.run_id == run_id)
    with create_session() as session:
        return list(session.scalars(query))


def delete_dag(dag_id: str) -> None:
    """Remove a DAG with its runs and task instances from Airflow (its file must be gone already)."""
    from airflow.exceptions import AirflowException, DagNotFound
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import delete_dag as airflow_delete_dag

    try:
        airflow_delete_dag(dag_id)
    except DagNotFound:
        pass
    except (AirflowException, SQLAlchemyError) as exc:
        raise AirflowRecordError(f"Airflow DAG '{dag_id}': {exc}") from None
    # delete_dag also clears the import errors of the factory file, which other YAMLs share;
    # a parse now brings back theirs (this DAG's YAML is gone, so not this DAG).
    request_reparse()


def stale_dags(prefix: str, quiet_seconds: float = 0.0) -> list[str]:
    """DAG ids starting with `prefix` that Airflow marks stale (no file builds them), and that no
    parse has written for `quiet_seconds`."""
    from datetime import timedelta

    from sqlalchemy import or_, select

    from det_airflow.airflow_compat import DagModel, create_session
    from det_airflow.master.lifecycle import now

    query = select(DagModel.dag_id).where(
        DagModel.dag_id.startswith(prefix, autoescape=True),
        DagModel.is_stale.is_(True),
        or_(
            DagModel.last_parsed_time.is_(None),
            DagModel.last_parsed_time < now() - timedelta(seconds=quiet_seconds),
        ),
    )
    with create_session() as session:
        return list(session.scalars(query))


def delete_dag_run(dag_id: str, run_id: str) -> None:
    """Remove one DAG run and its task instances, keeping the DAG."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import DagRun, create_session

    try:
        with create_session() as session:
            run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
            if run is not None:
                session.delete(run)
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"Airflow DAG run '{run_id}' of DAG '{dag_id}': {exc}") from None


def task_instance_states(
    keys: list[tuple[str, str, str, int]],
) -> dict[tuple[str, str, str, int], tuple[str | None, int]]:
    """(state, try_number) of each (dag_id, run_id, task_id, map_index) Airflow still has."""
    if not keys:
        return {}
    import logging

    from sqlalchemy import select, tuple_
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import TaskInstance, create_session

    query = select(
        TaskInstance.dag_id,
        TaskInstance.run_id,
        TaskInstance.task_id,
        TaskInstance.map_index,
        TaskInstance.state,
        TaskInstance.try_number,
    ).where(
        tuple_(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.map_index).in_(
            keys
        )
    )
    try:
        with create_session() as session:
            return {
                (dag_id, run_id, task_id, int(map_index)): (
                    None if state is None else str(state),
                    int(try_number),
                )
                for dag_id, run_id, task_id, map_index, state, try_number in session.execute(query)
            }
    except SQLAlchemyError as exc:
        # Never an empty answer: the caller takes a task instance Airflow lacks for a deleted one.
        logging.getLogger(__name__).warning("could not read Airflow's task instances", exc_info=True)
        raise AirflowRecordError(f"Airflow's task instances: {exc}") from None


def existing_dag_runs(runs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The (dag_id, run_id) pairs among `runs` that Airflow still has (its DAG or the run itself
    may have been deleted through Airflow's API or UI)."""
    if not runs:
        return set()
    from sqlalchemy import select, tuple_
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import DagRun, create_session

    query = select(DagRun.dag_id, DagRun.run_id).where(tuple_(DagRun.dag_id, DagRun.run_id).in_(runs))
    try:
        with create_session() as session:
            return {(dag_id, run_id) for dag_id, run_id in session.execute(query)}
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"Airflow's DAG runs: {exc}") from None


#: The task ids of an experiment DAG's trial slots and of their multi-node runs' other nodes.
TRIAL_TASK, NODE_TASK = "trial", "trial_node"

#: Added to the ``priority_weight`` (at most 99 from a priority) of a trial slot the master starts
#: for a trial the job queue has admitted: Airflow's pool then gives the slots it frees to that task
#: before the slots of other experiments that would start only to defer again.
ADMITTED_WEIGHT = 1000


def _admitted(weight: Any) -> Any:
    """The ``priority_weight`` of an admitted trial's slot, from its own (a column or a number)."""
    from sqlalchemy import case

    if isinstance(weight, int):
        return weight if weight >= ADMITTED_WEIGHT else weight + ADMITTED_WEIGHT
    return case((weight >= ADMITTED_WEIGHT, weight), else_=weight + ADMITTED_WEIGHT)


def _update_trial_task_instances(
    where: list[Any],
    values: dict[str, object],
    what: str,
    task_ids: tuple[str, ...] = (TRIAL_TASK,),
    session: Any = None,
) -> int:
    """Write ``values`` into the trial task instances (of ``task_ids``) ``where`` selects, in one
    UPDATE, in ``session``'s transaction or else in a transaction of its own; answers how many were
    changed. ``what`` names them in the error."""
    from contextlib import nullcontext

    from sqlalchemy import update
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import TaskInstance, create_session

    try:
        with nullcontext(session) if session is not None else create_session() as writing:
            result = writing.execute(
                update(TaskInstance)
                .where(TaskInstance.task_id.in_(task_ids), *where)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            return int(result.rowcount or 0)  # type: ignore[union-attr]
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"{what}: {exc}") from None


def _not_started(*states: Any) -> Any:
    """Task instances in one of ``states`` or in none yet."""
    from sqlalchemy import or_

    from det_airflow.airflow_compat import TaskInstance

    return or_(TaskInstance.state.in_(states), TaskInstance.state.is_(None))


def update_waiting_trials(
    dag_id: str, run_id: str, *, priority: int | None = None, pool: str | None = None
) -> int:
    """Rewrite Airflow's view of an experiment's trial task instances that have not started:
    ``priority_weight = 100 - priority`` and the pool; returns how many were changed."""
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import case

    from det_airflow.airflow_compat import TaskInstance

    values: dict[str, object] = {}
    if priority is not None:
        weight = priority_weight(priority)
        # A slot started for an admitted trial keeps going first (ADMITTED_WEIGHT).
        values["priority_weight"] = case(
            (TaskInstance.priority_weight >= ADMITTED_WEIGHT, _admitted(weight)), else_=weight
        )
    if pool is not None:
        values["pool"] = pool
    if not values:
        return 0
    waiting = _not_started(
        TaskInstanceState.SCHEDULED,
        TaskInstanceState.QUEUED,
        TaskInstanceState.DEFERRED,
        TaskInstanceState.UP_FOR_RETRY,
        TaskInstanceState.UP_FOR_RESCHEDULE,
    )
    return _update_trial_task_instances(
        [TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, waiting],
        values,
        f"Airflow task instances of DAG run '{run_id}' of DAG '{dag_id}'",
    )


def route_slot(dag_id: str, run_id: str, map_index: int, queue: str, task_id: str = TRIAL_TASK) -> bool:
    """Send a trial slot's task (or a node task) to ``queue`` from its next start on (the queue of
    the worker host its trial is placed on): Airflow's executor routes a task instance by its own
    ``queue``, which a deferred task keeps when it resumes. False when the task instance is not
    found."""
    from det_airflow.airflow_compat import TaskInstance

    where = [
        TaskInstance.dag_id == dag_id,
        TaskInstance.run_id == run_id,
        TaskInstance.map_index == map_index,
    ]
    what = f"Airflow task instance {task_id} {map_index} of DAG run '{run_id}' of DAG '{dag_id}'"
    return bool(_update_trial_task_instances(where, {"queue": queue}, what, (task_id,)))


def unroute_slot(dag_id: str, run_id: str, map_index: int, task_id: str = TRIAL_TASK) -> bool:
    """Send a trial slot's task (or a node task) that runs on the host it was sent to back to
    Airflow's default queue for its later tries. Airflow queues a retry where the failed try ran:
    a task killed with its host (a worker gone) would otherwise be retried on that host's queue,
    which no worker reads, before the master sees the host gone. Retried from the default queue, it
    starts on a live worker and the master places its trial again. False when nothing changed."""
    from airflow.sdk import conf

    from det_airflow.airflow_compat import TaskInstance

    default_queue = conf.get("operators", "default_queue", fallback="default")
    where = [
        TaskInstance.dag_id == dag_id,
        TaskInstance.run_id == run_id,
        TaskInstance.map_index == map_index,
        TaskInstance.queue != default_queue,
    ]
    what = f"Airflow task instance {task_id} {map_index} of DAG run '{run_id}' of DAG '{dag_id}'"
    return bool(_update_trial_task_instances(where, {"queue": default_queue}, what, (task_id,)))


@dataclass
class WaitingSlots:
    """A DAG run's trial slots that may be given a trial: ``deferred``, waiting for one (not
    watching a trial's pods), and ``unstarted``, whose task has not started yet (most often
    waiting for a slot of its Airflow pool). Map indexes, ascending."""

    deferred: list[int] = field(default_factory=list)
    unstarted: list[int] = field(default_factory=list)


def slots_waiting_for_trials(runs: dict[str, str | None]) -> dict[str, tuple[str, WaitingSlots]]:
    """The trial slots that wait for a trial (see :class:`WaitingSlots`) in the unfinished run of
    each DAG of ``runs`` (DAG id -> its run id, or None before a slot linked it: a `det experiment
    create` DAG's one run), in one query for them all: DAG id -> (run id, slots). A DAG none of whose
    slots waits is left out, and so is an unlinked one whose waiting slots are in several runs."""
    if not runs:
        return {}
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import and_, or_, select
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import DagRun, TaskInstance, create_session

    deferred = and_(TaskInstance.state == TaskInstanceState.DEFERRED, TaskInstance.next_method == "resume")
    query = (
        select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.map_index, TaskInstance.state)
        .join(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .where(
            TaskInstance.dag_id.in_(list(runs)),
            TaskInstance.task_id == TRIAL_TASK,
            DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]),
            or_(deferred, _not_started(TaskInstanceState.SCHEDULED)),
        )
        .order_by(TaskInstance.map_index)
    )
    try:
        with create_session() as session:
            found = session.execute(query).all()
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"Airflow task instances of DAGs {', '.join(sorted(runs))}: {exc}") from None
    by_run: dict[str, dict[str, WaitingSlots]] = {}
    for dag_id, run_id, map_index, state in found:
        if runs[dag_id] not in (None, run_id):
            continue
        slots = by_run.setdefault(dag_id, {}).setdefault(run_id, WaitingSlots())
        (slots.deferred if state == TaskInstanceState.DEFERRED else slots.unstarted).append(int(map_index))
    return {dag_id: next(iter(waiting.items())) for dag_id, waiting in by_run.items() if len(waiting) == 1}


def route_unstarted_slots(dag_id: str, run_id: str, queues: dict[int, str], session: Any = None) -> list[int]:
    """Send trial slots whose task has not started yet to the queue of the host their trial is
    placed on (map index -> queue), going first in their Airflow pool (:data:`ADMITTED_WEIGHT`);
    answers the map indexes sent (not those the scheduler queued meanwhile: they move when they
    ask for their trial). In ``session``'s transaction when given."""
    from airflow.utils.state import TaskInstanceState

    from det_airflow.airflow_compat import TaskInstance

    def route(map_index: int, queue: str) -> bool:
        where = [
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.map_index == map_index,
            _not_started(TaskInstanceState.SCHEDULED),
        ]
        values = {"queue": queue, "priority_weight": _admitted(TaskInstance.priority_weight)}
        what = f"Airflow task instance {TRIAL_TASK} {map_index} of DAG run '{run_id}' of DAG '{dag_id}'"
        return bool(_update_trial_task_instances(where, values, what, session=session))

    return [map_index for map_index, queue in sorted(queues.items()) if route(map_index, queue)]


def requeue_trial_tasks(live_queues: set[str], prefix: str) -> int:
    """Send back to Airflow's default queue the trial tasks waiting to start (scheduled, up for
    retry, deferred) on the queue of a worker host that is gone (a queue named ``prefix…`` not in
    ``live_queues``): any live worker takes them, and the master places their trials again.
    Answers how many were sent back."""
    from airflow.sdk import conf
    from airflow.utils.state import TaskInstanceState

    from det_airflow.airflow_compat import TaskInstance

    waiting = _not_started(
        TaskInstanceState.SCHEDULED,
        TaskInstanceState.UP_FOR_RETRY,
        TaskInstanceState.DEFERRED,
        TaskInstanceState.UP_FOR_RESCHEDULE,
    )
    where = [
        TaskInstance.queue.startswith(prefix, autoescape=True),
        TaskInstance.queue.not_in(sorted(live_queues)),
        waiting,
    ]
    default_queue = conf.get("operators", "default_queue", fallback="default")
    return _update_trial_task_instances(
        where, {"queue": default_queue}, "Airflow's trial task instances", (TRIAL_TASK, NODE_TASK)
    )


def start_deferred_slots_anew(
    dag_id: str, run_id: str, map_indexes: list[int], queues: dict[int, str] | None = None
) -> list[int]:
    """Start these trial slots of a DAG run now, each in a new try, instead of waiting for their
    triggers; answers the map indexes started (only slots still deferred on their wait for a trial).

    This is Airflow's own "clear" of a deferred task instance: the try is kept in the task's
    history (as a success: its process checkpointed the trial and exited 0), the next one is
    scheduled at once, with its retries renewed. A new try, not the
    deferred one resumed: Airflow fails a deferred try resumed within moments of deferring when the
    scheduler reads the executor's report that the deferring process exited only after queuing the
    resumed process under the same key (see `MIN_WAIT_SECONDS` in operators/triggers.py). Under a
    new try's key that late report changes nothing.

    ``queues``: map index -> the queue its new try is sent to (the worker host its trial is placed
    on); clearing otherwise sends it to its task's own queue.
    """
    from airflow.utils.state import TaskInstanceState

    from det_airflow.airflow_compat import TaskInstance

    waiting = [TaskInstance.state == TaskInstanceState.DEFERRED, TaskInstance.next_method == "resume"]
    # "resume": waiting for a trial, not watching a trial's pods.
    return _start_anew(dag_id, run_id, TRIAL_TASK, map_indexes, queues or {}, waiting, "task instances")


def start_node_tasks(dag_id: str, run_id: str, map_indexes: list[int], queues: dict[int, str]) -> list[int]:
    """Start these node tasks of a DAG run now, each in a new try on its ``queues`` entry (the host
    its node is placed on), as :func:`start_deferred_slots_anew` does for slots: those deferred
    waiting to move, and those that ended (a node task ends when no run needs it). Running or
    queued ones are left to ask for their node themselves. Answers the map indexes started."""
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import and_, or_

    from det_airflow.airflow_compat import TaskInstance

    ended = (
        TaskInstanceState.SUCCESS,
        TaskInstanceState.SKIPPED,
        TaskInstanceState.FAILED,
        TaskInstanceState.UPSTREAM_FAILED,
    )
    startable = or_(
        TaskInstance.state.in_(ended),
        and_(TaskInstance.state == TaskInstanceState.DEFERRED, TaskInstance.next_method == "resume"),
    )
    return _start_anew(dag_id, run_id, NODE_TASK, map_indexes, queues, [startable], "node task instances")


def _start_anew(
    dag_id: str,
    run_id: str,
    task_id: str,
    map_indexes: list[int],
    queues: dict[int, str],
    where: list[Any],
    what: str,
) -> list[int]:
    """Clear the mapped task instances of ``task_id`` that ``where`` selects, each to a new try on
    its ``queues`` entry; a deferred one's try is kept as a success (its process exited 0 when it
    deferred; Airflow records a try cleared unfinished as failed). Answers the map indexes."""
    if not map_indexes:
        return []
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import TaskInstance, clear_task_instances, create_session, with_row_locks

    query = select(TaskInstance).where(
        TaskInstance.dag_id == dag_id,
        TaskInstance.run_id == run_id,
        TaskInstance.task_id == task_id,
        TaskInstance.map_index.in_(map_indexes),
        *where,
    )
    try:
        with create_session() as session:
            # Locked until committed: a trigger firing meanwhile finds the task no longer deferred.
            tis = list(
                session.scalars(with_row_locks(query, session=session, of=TaskInstance, key_share=False))
            )
            for ti in tis:
                if ti.state == TaskInstanceState.DEFERRED:
                    ti.state = TaskInstanceState.SUCCESS
                    ti.end_date = datetime.now(UTC)
                    ti.set_duration()
            clear_task_instances(tis, session, dag_run_state=False)
            for ti in tis:
                if ti.map_index in queues:
                    ti.queue = queues[ti.map_index]
                ti.priority_weight = _admitted(int(ti.priority_weight or 0))
            return sorted(int(ti.map_index) for ti in tis)
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"Airflow {what} of DAG run '{run_id}' of DAG '{dag_id}': {exc}") from None


def deferred_slots() -> dict[tuple[str, str], list[int]]:
    """The trial slots deferred waiting for a trial (not watching a trial's pods) in every
    unfinished DAG run: (dag_id, run_id) -> their map indexes."""
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import and_, select
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.airflow_compat import DagRun, TaskInstance, create_session

    query = (
        select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.map_index)
        .join(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .where(
            TaskInstance.task_id == TRIAL_TASK,
            TaskInstance.state == TaskInstanceState.DEFERRED,
            TaskInstance.next_method == "resume",
            DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]),
        )
        .order_by(TaskInstance.map_index)
    )
    try:
        with create_session() as session:
            found = session.execute(query).all()
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"Airflow's deferred trial task instances: {exc}") from None
    runs: dict[tuple[str, str], list[int]] = {}
    for dag_id, run_id, map_index in found:
        runs.setdefault((dag_id, run_id), []).append(int(map_index))
    return runs


def finished_dag_runs(runs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The (dag_id, run_id) pairs among `runs` whose DAG run has ended (success or failed)."""
    if not runs:
        return set()
    from airflow.utils.state import DagRunState
    from sqlalchemy import select, tuple_

    from det_airflow.airflow_compat import DagRun, create_session

    query = select(DagRun.dag_id, DagRun.run_id).where(
        tuple_(DagRun.dag_id, DagRun.run_id).in_(runs),
        DagRun.state.in_([DagRunState.SUCCESS, DagRunState.FAILED]),
    )
    with create_session() as session:
        return {(dag_id, run_id) for dag_id, run_id in session.execute(query)}


# --- FAB's per-DAG permissions (only under FAB's auth manager) ---------------------------------

# What FAB's User role may do to every DAG, which would let any user change another's experiment.
# `det admin migrate` takes it away; each owner edits their DAGs through dagfactory.owner_role().
GLOBAL_DAG_CHANGES = (("can_edit", "DAGs"), ("can_delete", "DAGs"))
PLAIN_USER_ROLE = "User"


def ensure_owner_role(owner: str) -> str | None:
    """Under FAB: the role through which `owner` edits their experiment DAGs, created when missing,
    with `owner` in it (when FAB knows such a user). None under other auth managers.

    Called before the experiment's file is written: a DAG whose `access_control` names a missing
    role is refused by FAB when the DAG is written.
    """
    from det_airflow.dagfactory import owner_role, uses_fab

    if not uses_fab():
        return None
    from det_airflow.airflow_compat import ApplessAirflowSecurityManager, create_session

    name = owner_role(owner)
    with create_session() as session:
        manager = ApplessAirflowSecurityManager(session=session)
        role = manager.add_role(name)  # commits; finds the role a concurrent create made
        user = manager.find_user(username=owner)
        if user is not None and role not in user.roles:
            user.roles.append(role)
    forget_cached_logins()
    return name


def forget_cached_logins() -> None:
    """FAB keeps each logged-in user, with their permissions, for `[fab] cache_ttl` seconds: drop
    them in this process so that a new role or DAG permission holds at the next request."""
    try:
        from det_airflow.airflow_compat import FabAuthManager
    except ImportError:
        return
    FabAuthManager.cache.clear()


def restrict_plain_users() -> list[str]:
    """Under FAB: take edit and delete of every DAG away from the User role, so that a plain user
    changes only their own experiments' DAGs (through their owner role). Answers what it did."""
    from det_airflow.dagfactory import uses_fab

    if not uses_fab():
        return []
    from airflow.sdk import conf

    from det_airflow.airflow_compat import ApplessAirflowSecurityManager, create_session

    with create_session() as session:
        manager = ApplessAirflowSecurityManager(session=session)
        role = manager.find_role(PLAIN_USER_ROLE)
        if role is None:
            return [f"FAB role {PLAIN_USER_ROLE}: none, nothing to restrict"]
        removed = []
        for action, resource in GLOBAL_DAG_CHANGES:
            permission = manager.get_permission(action, resource)
            if permission is not None and permission in role.permissions:
                manager.remove_permission_from_role(role, permission)
                removed.append(action)
    forget_cached_logins()
    what = " and ".join(a for a, _ in GLOBAL_DAG_CHANGES)
    lines = [
        f"FAB role {PLAIN_USER_ROLE}: {'removed' if removed else 'already without'} {what} on all DAGs; "
        "each experiment's owner edits its DAG through their det-owner-<name> role"
    ]
    if conf.getboolean("fab", "update_fab_perms", fallback=True):
        lines.append(
            "warning: [fab] update_fab_perms is True, so FAB gives them back to the User role when "
            "the API server next starts: set it to False, or run `det admin migrate` after each start"
        )
    return lines
