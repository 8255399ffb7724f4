"""What the master reads and writes of Airflow's task instances when it sends trial slots to the
hosts their trials are placed on: on Airflow's own tables (SQLite), with a real run of a published
experiment DAG."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

import pytest
from airflow import settings
from airflow.models.dagrun import DagRun
from airflow.models.serialized_dag import SerializedDagModel
from airflow.models.taskinstance import TaskInstance
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.types import DagRunTriggeredByType, DagRunType
from sqlalchemy import select, update

from det_airflow.dagfactory import experiment_dag_id
from det_airflow.master import airflow_bridge, hosts, schema, trials
from tests.unit.master.creating import CONFIG, Creator
from tests.unit.master.test_publish_dag import airflow_db  # noqa: F401  (fixture)


class Run(NamedTuple):
    dag: str
    id: str


def start_run(creator: Creator) -> Run:
    """Submit an experiment (3 trial slots: its max_concurrent_trials): the master writes its DAG and
    starts its one run."""
    config = CONFIG.replace("name: single", "name: random\n  max_trials: 3\n  max_concurrent_trials: 3")
    answer = creator.create(config=config)
    assert answer.status_code == 200, answer.text
    dag_id = experiment_dag_id(answer.json()["experiment"]["id"])
    with settings.Session() as session:  # type: ignore[misc]
        runs = session.execute(select(DagRun.run_id, DagRun.run_type).where(DagRun.dag_id == dag_id)).all()
    assert [run_type for _, run_type in runs] == [DagRunType.MANUAL]
    return Run(dag_id, runs[0][0])


def slots(dag_id: str) -> dict[int, tuple[str | None, str, int]]:
    """map index -> (state, queue, priority_weight) of the run's trial slots."""
    with settings.Session() as session:  # type: ignore[misc]
        rows = session.execute(
            select(
                TaskInstance.map_index, TaskInstance.state, TaskInstance.queue, TaskInstance.priority_weight
            )
            .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == "trial")
            .order_by(TaskInstance.map_index)
        ).all()
    return {index: (state, queue, weight) for index, state, queue, weight in rows}


def set_slot(dag_id: str, map_index: int, **values: object) -> None:
    with settings.Session() as session:  # type: ignore[misc]
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == "trial",
                TaskInstance.map_index == map_index,
            )
            .values(**values)
        )
        session.commit()


@pytest.fixture
def run(airflow_db: Creator) -> Run:  # noqa: F811
    return start_run(airflow_db)


def test_a_new_run_is_its_dags_only_one_and_its_slots_are_unstarted(run: Run) -> None:
    unstarted = (run.id, airflow_bridge.WaitingSlots(deferred=[], unstarted=[0, 1, 2]))
    # Not linked yet (no slot asked): its DAG's one run; linked: that run.
    assert airflow_bridge.slots_waiting_for_trials({run.dag: None, "det_no_such_dag": None}) == {
        run.dag: unstarted
    }
    assert airflow_bridge.slots_waiting_for_trials({run.dag: run.id}) == {run.dag: unstarted}
    assert airflow_bridge.slots_waiting_for_trials({run.dag: "another-run"}) == {}


def test_an_unlinked_dag_with_two_runs_waiting_has_no_sole_run(run: Run) -> None:
    with settings.Session() as session:  # type: ignore[misc]
        dag = SerializedDagModel.get_dag(run.dag, session=session)
        assert dag is not None
        now = datetime.now(UTC)
        dag.create_dagrun(
            run_id="manual__again",
            run_after=now,
            run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST,
            state=DagRunState.RUNNING,
            session=session,
        )
        session.commit()
    assert airflow_bridge.slots_waiting_for_trials({run.dag: None}) == {}
    # Linked, it is that run's.
    assert airflow_bridge.slots_waiting_for_trials({run.dag: run.id})[run.dag][0] == run.id


def test_slots_deferred_waiting_for_a_trial_are_told_from_unstarted_and_running_ones(run: Run) -> None:
    set_slot(run.dag, 0, state=TaskInstanceState.DEFERRED, next_method="resume")
    set_slot(run.dag, 1, state=TaskInstanceState.RUNNING)
    set_slot(run.dag, 2, state=TaskInstanceState.SCHEDULED)

    assert airflow_bridge.slots_waiting_for_trials({run.dag: run.id})[run.dag][
        1
    ] == airflow_bridge.WaitingSlots(deferred=[0], unstarted=[2])
    # A slot watching a trial's pods waits for them, not for a trial.
    set_slot(run.dag, 0, next_method="resume_kubernetes")
    assert airflow_bridge.slots_waiting_for_trials({run.dag: run.id})[run.dag][1].deferred == []


def test_unstarted_slots_go_to_their_hosts_queue_and_first_in_their_pool(run: Run) -> None:
    weight = slots(run.dag)[0][2]
    assert weight < airflow_bridge.ADMITTED_WEIGHT
    set_slot(run.dag, 1, state=TaskInstanceState.SCHEDULED)
    set_slot(run.dag, 2, state=TaskInstanceState.QUEUED)  # the scheduler sent it meanwhile

    routed = airflow_bridge.route_unstarted_slots(
        run.dag, run.id, {0: "det-host-a", 1: "det-host-b", 2: "det-host-a"}
    )

    assert routed == [0, 1]
    after = slots(run.dag)
    assert after[0][1:] == ("det-host-a", weight + airflow_bridge.ADMITTED_WEIGHT)
    assert after[1][1:] == ("det-host-b", weight + airflow_bridge.ADMITTED_WEIGHT)
    assert after[2][1:] == ("default", weight)  # it moves once it asks for its trial
    # Sent again (a later pass): the weight is not raised twice.
    assert airflow_bridge.route_unstarted_slots(run.dag, run.id, {0: "det-host-a"}) == [0]
    assert slots(run.dag)[0][2] == weight + airflow_bridge.ADMITTED_WEIGHT


def test_a_deferred_slot_started_anew_goes_first_in_its_pool(run: Run) -> None:
    weight = slots(run.dag)[1][2]
    set_slot(run.dag, 1, state=TaskInstanceState.DEFERRED, next_method="resume", try_number=1)

    assert airflow_bridge.start_deferred_slots_anew(run.dag, run.id, [1], {1: "det-host-b"}) == [1]

    state, queue, new_weight = slots(run.dag)[1]
    assert state is None  # cleared: the scheduler starts its next try
    assert (queue, new_weight) == ("det-host-b", weight + airflow_bridge.ADMITTED_WEIGHT)


def test_a_new_priority_keeps_admitted_slots_first(run: Run) -> None:
    airflow_bridge.route_unstarted_slots(run.dag, run.id, {0: "det-host-a"})

    airflow_bridge.update_waiting_trials(run.dag, run.id, priority=10)

    weights = {index: weight for index, (_, _, weight) in slots(run.dag).items()}
    assert weights == {0: 90 + airflow_bridge.ADMITTED_WEIGHT, 1: 90, 2: 90}


def test_a_created_experiments_first_slots_start_on_their_trials_hosts(airflow_db: Creator) -> None:  # noqa: F811
    """With worker hosts reporting, the run the master starts has its first trials in its slots and
    each slot on its trial's host's queue before Airflow's scheduler sees it: no first try starts
    wherever Celery sends it only to move. Best fit: the 1-slot host first, then the 2-slot one."""
    for host_id, free in (("a", 2), ("b", 1)):
        inventory = {"slot_type": "cpu", "slots": free, "devices": [], "queue": f"det-host-{host_id}"}
        with airflow_db.people.db.begin() as conn:
            hosts.report(conn, host_id, {**inventory, "address": host_id})

    run = start_run(airflow_db)

    after = slots(run.dag)
    assert {index: queue for index, (_, queue, _) in after.items()} == {
        0: "det-host-b",
        1: "det-host-a",
        2: "det-host-a",
    }
    assert all(weight >= airflow_bridge.ADMITTED_WEIGHT for _, _, weight in after.values())
    with airflow_db.people.db.read() as conn:
        held = conn.execute(
            select(schema.trials.c.slot, schema.trials.c.host).order_by(schema.trials.c.slot)
        ).all()
    assert [tuple(row) for row in held] == [(0, "b"), (1, "a"), (2, "a")]


def test_first_trials_that_cannot_be_placed_now_are_asked_for_by_their_slots(
    airflow_db: Creator,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database error while placing the first trials: the experiment is created all the same, its
    run starts, and its slots ask for their trials when they start, wherever Celery sends them."""
    from sqlalchemy.exc import OperationalError

    from det_airflow.master import trials

    with airflow_db.people.db.begin() as conn:
        hosts.report(
            conn, "a", {"slot_type": "cpu", "slots": 4, "devices": [], "queue": "det-host-a", "address": "a"}
        )

    def fail(*args: object, **kwargs: object) -> None:
        raise OperationalError("SELECT", {}, Exception("the database went away"))

    monkeypatch.setattr(trials, "_place_in_slots", fail)
    run = start_run(airflow_db)

    assert "could not give experiment 1's slots their first trials now" in caplog.text
    assert {queue for _, queue, _ in slots(run.dag).values()} == {"default"}


def test_a_slot_running_on_its_host_is_retried_from_the_default_queue(run: Run) -> None:
    """Once a slot's task runs its trial on the host it was sent to, its later tries go to the
    default queue: a retry after its host died must not wait on that host's queue."""
    airflow_bridge.route_unstarted_slots(run.dag, run.id, {0: "det-host-a"})
    set_slot(run.dag, 0, state=TaskInstanceState.RUNNING)

    assert airflow_bridge.unroute_slot(run.dag, run.id, 0)

    assert slots(run.dag)[0][1] == "default"
    assert not airflow_bridge.unroute_slot(run.dag, run.id, 0)  # nothing left to change


def test_slots_left_waiting_for_a_search_that_is_done_end_in_a_new_try(airflow_db: Creator) -> None:  # noqa: F811
    run = start_run(airflow_db)
    people = airflow_db.people
    exps = schema.experiments
    with people.db.begin() as conn:
        (e,) = conn.execute(select(exps.c.id).where(exps.c.dag_id == run.dag)).scalars()
        conn.execute(update(exps).where(exps.c.id == e).values(dag_run_id=run.id))
        conn.execute(
            update(schema.trials).where(schema.trials.c.experiment_id == e).values(state="COMPLETED")
        )
    set_slot(run.dag, 0, state=TaskInstanceState.DEFERRED, next_method="resume", try_number=1)
    set_slot(run.dag, 1, state=TaskInstanceState.DEFERRED, next_method="resume_kubernetes", try_number=1)
    set_slot(run.dag, 2, state=TaskInstanceState.RUNNING, try_number=1)
    assert airflow_bridge.deferred_slots() == {(run.dag, run.id): [0]}

    # Its search may still create trials: the slot waits.
    assert trials.end_slots_left_waiting(people.db) == []
    assert slots(run.dag)[0][0] == TaskInstanceState.DEFERRED

    with people.db.begin() as conn:
        conn.execute(update(exps).where(exps.c.id == e).values(search_done=True))
    assert trials.end_slots_left_waiting(people.db) == [0]

    # Slot 0 starts its next try (told `done`, it ends); slot 1 still watches its trial's pods.
    assert [slots(run.dag)[i][0] for i in range(3)] == [
        None,
        TaskInstanceState.DEFERRED,
        TaskInstanceState.RUNNING,
    ]
    assert airflow_bridge.deferred_slots() == {}  # none waits for a trial any more
