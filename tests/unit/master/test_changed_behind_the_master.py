"""Trial task instances changed through Airflow's own API or UI, not by the master: a trial slot's
task instance failed, cleared or deleted by someone, or the experiment's DAG run deleted. The
master notices and ends or requeues the trial (and the experiment) instead of showing it ACTIVE
while nothing runs it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow import settings
from airflow.models.dagrun import DagRun
from airflow.models.serialized_dag import SerializedDagModel
from airflow.models.taskinstance import TaskInstance, clear_task_instances
from airflow.models.tasklog import LogTemplate
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.types import DagRunTriggeredByType, DagRunType
from sqlalchemy import delete, select, update

from det_airflow.master import housekeeping, trial_logs, trials
from det_airflow.master.airflow_bridge import experiment_run_id
from tests.unit.master import test_publish_dag
from tests.unit.master.creating import Creator

airflow_db = test_publish_dag.airflow_db  # Airflow's whole schema, and the factory
ONE_TRIAL = """
name: behind
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 1}}
max_restarts: %d
"""


def _running_trial(creator: Creator, max_restarts: int) -> tuple[int, int, str]:
    """An experiment whose one trial runs in slot 0 of its real DAG run: (experiment, trial, dag id)."""
    answer = creator.create(config=ONE_TRIAL % max_restarts)
    assert answer.status_code == 200, answer.text
    e, dag_id = answer.json()["experiment"]["id"], answer.json()["experiment"]["dag_id"]
    with settings.Session() as session:  # type: ignore[misc]
        if session.scalar(select(LogTemplate.id)) is None:
            session.add(LogTemplate(filename="{{ ti.task_id }}.log", elasticsearch_id="{{ ti.task_id }}"))
            session.flush()
        # The master started the DAG's one run as it wrote the DAG, unless it could not then.
        if session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id)) is None:
            dag = SerializedDagModel.get_dag(dag_id, session=session)
            assert dag is not None
            dag.create_dagrun(
                run_id=experiment_run_id(dag_id),
                run_after=datetime.now(UTC),
                run_type=DagRunType.MANUAL,
                triggered_by=DagRunTriggeredByType.TEST,
                state=DagRunState.RUNNING,
                session=session,
            )
        session.execute(update(DagRun).where(DagRun.dag_id == dag_id).values(state=DagRunState.RUNNING))
        session.flush()
        # Slot 0's task runs: its first try asks the master for a trial.
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == "trial")
            .values(state=TaskInstanceState.RUNNING, try_number=1)
        )
        session.commit()
    task = {
        "dag_id": dag_id,
        "run_id": experiment_run_id(dag_id),
        "task_id": "trial",
        "map_index": 0,
        "try_number": 1,
    }
    with creator.people.db.begin() as conn:
        acquired = trials.acquire(conn, e, 0, task, dry_run=False)
    assert acquired["status"] == "run", acquired
    return e, int(acquired["trial"].id), dag_id


def _trial_task(dag_id: str) -> Any:
    return (TaskInstance.dag_id == dag_id) & (TaskInstance.task_id == "trial")


def _describe(creator: Creator, e: int) -> dict[str, Any]:
    """What alice sees once the master's background jobs have looked (they do every few seconds)."""
    for job in ("end experiments ended in Airflow", "reclaim lost runs"):
        assert housekeeping.run_job(job, creator.people.db)
    answer = creator.people.call("alice", "GET", f"/experiments/{e}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _logs(creator: Creator, trial_id: int) -> list[str]:
    with creator.people.db.read() as conn:
        return [r.message for r in trial_logs.read_logs(conn, trial_id, after=None, limit=None, tail=None)]


def test_a_trial_task_set_failed_through_airflow_ends_the_trial_past_its_restarts(
    airflow_db: Creator,
) -> None:
    e, t, dag_id = _running_trial(airflow_db, max_restarts=0)
    with settings.Session() as session:  # type: ignore[misc]
        session.execute(
            update(TaskInstance).where(_trial_task(dag_id)).values(state=TaskInstanceState.FAILED)
        )
        session.commit()

    seen = _describe(airflow_db, e)

    assert [trial["state"] for trial in seen["trials"]] == ["ERROR"]
    assert seen["experiment"]["state"] == "ERROR"
    assert any(
        f"its task {dag_id}/{experiment_run_id(dag_id)}/trial/0 ended failed" in line
        for line in _logs(airflow_db, t)
    )


def test_a_trial_task_cleared_through_airflow_requeues_the_trial_for_the_next_try(
    airflow_db: Creator,
) -> None:
    e, t, dag_id = _running_trial(airflow_db, max_restarts=1)
    with settings.Session() as session:  # type: ignore[misc]
        clear_task_instances(list(session.scalars(select(TaskInstance).where(_trial_task(dag_id)))), session)
        session.commit()

    seen = _describe(airflow_db, e)

    assert [(x["state"], x["restarts"]) for x in seen["trials"]] == [("QUEUED", 1)]
    assert seen["experiment"]["state"] == "ACTIVE"
    assert any("was cleared through Airflow's API or UI" in line for line in _logs(airflow_db, t))
    # The cleared task's next try runs it again.
    task = {
        "dag_id": dag_id,
        "run_id": experiment_run_id(dag_id),
        "task_id": "trial",
        "map_index": 0,
        "try_number": 2,
    }
    with airflow_db.people.db.begin() as conn:
        again = trials.acquire(conn, e, 0, task, dry_run=False)
    assert (again["status"], again["trial"].id, again["trial"].state) == ("run", t, "STARTING")


def test_a_trial_task_deleted_through_airflow_restarts_the_trial(airflow_db: Creator) -> None:
    e, t, dag_id = _running_trial(airflow_db, max_restarts=1)
    with settings.Session() as session:  # type: ignore[misc]
        session.execute(delete(TaskInstance).where(_trial_task(dag_id)))
        session.commit()

    seen = _describe(airflow_db, e)

    assert [(x["state"], x["restarts"]) for x in seen["trials"]] == [("QUEUED", 1)]
    assert any("is gone from Airflow" in line for line in _logs(airflow_db, t))


def test_an_experiment_whose_dag_run_was_deleted_through_airflow_ends_in_error(
    airflow_db: Creator,
) -> None:
    e, t, dag_id = _running_trial(airflow_db, max_restarts=5)
    with settings.Session() as session:  # type: ignore[misc]
        session.execute(delete(DagRun).where(DagRun.dag_id == dag_id))
        session.commit()

    seen = _describe(airflow_db, e)

    assert [trial["state"] for trial in seen["trials"]] == ["ERROR"]
    assert seen["experiment"]["state"] == "ERROR"
    why = f"its DAG run '{experiment_run_id(dag_id)}' is gone from Airflow (deleted through its API or UI)"
    assert seen["experiment"]["error"] == why
    answer = airflow_db.people.call("alice", "GET", f"/trials/{t}")
    assert answer.json()["trial"]["state"] == "ERROR"


def test_an_experiment_whose_dag_run_was_ended_through_airflow_ends_in_error(
    airflow_db: Creator,
) -> None:
    e, _, dag_id = _running_trial(airflow_db, max_restarts=5)
    with settings.Session() as session:  # type: ignore[misc]
        session.execute(update(DagRun).where(DagRun.dag_id == dag_id).values(state=DagRunState.SUCCESS))
        session.commit()

    seen = _describe(airflow_db, e)

    assert [trial["state"] for trial in seen["trials"]] == ["ERROR"]
    assert seen["experiment"]["state"] == "ERROR"
    assert (
        seen["experiment"]["error"]
        == f"its DAG run '{experiment_run_id(dag_id)}' was ended in Airflow before the experiment ended"
    )
