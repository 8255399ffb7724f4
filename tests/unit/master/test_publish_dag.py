"""A created experiment's DAG is in Airflow's tables when the create answers: the very DAG the DAG
processor writes when it parses the factory, so its later parse changes nothing. Without the factory
the master falls back to asking Airflow for a parse, and the experiment stands."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow import settings
from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
from airflow.models import import_all_models
from airflow.models.base import Base
from airflow.models.dag import DagModel
from airflow.models.dag_version import DagVersion
from airflow.models.dagbundle import DagBundleModel
from airflow.models.serialized_dag import SerializedDagModel
from airflow.models.tasklog import LogTemplate
from sqlalchemy import delete, func, select

from det_airflow.dagfactory import experiment_dag_id
from det_airflow.master import airflow_bridge
from tests.unit.master.creating import Creator

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def airflow_db(creator: Creator) -> Iterator[Creator]:
    """Airflow's whole metadata schema on the creator's SQLite file, and the factory in its DAGs folder."""
    import_all_models()
    Base.metadata.create_all(settings.engine)
    with settings.Session() as session:  # type: ignore[misc]
        session.add(DagBundleModel(name=airflow_bridge.DEFAULT_BUNDLE))
        # `airflow db migrate` writes the first log template; every DAG run names it.
        session.add(LogTemplate(filename="{{ ti.task_id }}.log", elasticsearch_id="{{ ti.task_id }}"))
        session.commit()
    folder = airflow_bridge.dags_folder()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dags" / airflow_bridge.FACTORY_FILE, folder)
    yield creator


def _serialized(dag_id: str) -> SerializedDagModel | None:
    with settings.Session() as session:  # type: ignore[misc]
        return session.scalar(select(SerializedDagModel).where(SerializedDagModel.dag_id == dag_id))


def _linked_run(creator: Creator, experiment_id: int) -> str | None:
    """The DAG run the master linked the experiment to."""
    from det_airflow.master import schema

    exps = schema.experiments
    with creator.people.db.read() as conn:
        return conn.execute(select(exps.c.dag_run_id).where(exps.c.id == experiment_id)).scalar_one()


def _versions(dag_id: str) -> int:
    with settings.Session() as session:  # type: ignore[misc]
        return int(session.scalar(select(func.count()).where(DagVersion.dag_id == dag_id)) or 0)


def test_the_dag_is_in_airflow_when_the_create_answers_without_a_parse(airflow_db: Creator) -> None:
    answer = airflow_db.create()
    assert answer.status_code == 200, answer.text
    dag_id = experiment_dag_id(answer.json()["experiment"]["id"])

    stored = _serialized(dag_id)
    assert stored is not None
    assert stored.dag.fileloc == str(airflow_bridge.dags_folder() / airflow_bridge.FACTORY_FILE)
    assert sorted(stored.dag.task_dict) == ["finalize", "trial"]
    assert stored.dag.task_dict["trial"].priority_weight == 100 - 7  # resources.priority 7
    with settings.Session() as session:  # type: ignore[misc]
        model = session.get(DagModel, dag_id)
        assert model is not None
        # Unpaused, named for the factory file, as the DAG processor writes it.
        assert (model.is_paused, model.relative_fileloc) == (False, airflow_bridge.FACTORY_FILE)
        # Its one run is made with it: the scheduler's own query for DAGs needing a run does not
        # list it (test_the_run_starts_with_the_dag_as_the_scheduler_would_start_it).
        due, _ = DagModel.dags_needing_dagruns(session)
        assert dag_id not in {m.dag_id for m in due}
    assert airflow_db.parse_requests() == 0


def test_the_dag_processors_parse_of_the_factory_writes_the_same_dag(
    airflow_db: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow skips rewriting a DAG written in the last [core] min_serialized_dag_update_interval
    # seconds; at 0 the parse below compares its DAG with the published one.
    monkeypatch.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    experiment_id = airflow_db.create().json()["experiment"]["id"]
    dag_id = experiment_dag_id(experiment_id)
    published = _serialized(dag_id)
    assert published is not None

    folder = airflow_bridge.dags_folder()
    bag = BundleDagBag(
        dag_folder=folder / airflow_bridge.FACTORY_FILE,
        bundle_path=folder,
        bundle_name=airflow_bridge.DEFAULT_BUNDLE,
        load_op_links=False,
    )
    assert dag_id in bag.dags and not bag.import_errors
    with settings.Session() as session:  # type: ignore[misc]
        sync_bag_to_db(bag, airflow_bridge.DEFAULT_BUNDLE, None, session=session)
        session.commit()

    parsed = _serialized(dag_id)
    assert parsed is not None
    assert parsed.dag_hash == published.dag_hash
    assert _versions(dag_id) == 1


def test_without_the_factory_the_experiment_stands_and_a_parse_is_asked_for(
    creator: Creator, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=airflow_bridge.__name__):
        answer = creator.create()
    assert answer.status_code == 200, answer.text
    experiment_id = answer.json()["experiment"]["id"]
    assert creator.count() == 1
    assert creator.parse_requests() == 1
    assert (
        f"could not write experiment {experiment_id}'s DAG to Airflow now; asking for a parse" in caplog.text
    )
    assert f"{airflow_bridge.FACTORY_FILE}: no such file" in caplog.text


def test_no_parse_sees_a_new_experiment_before_its_dag_is_written(
    airflow_db: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DAG processor and the master must never both insert a new DAG: a parse that loses that
    race stops Airflow's DAG processor. So parses find the file only after the master wrote the DAG."""
    from det_airflow.dagfactory import build_dags, experiment_file, staged_experiment_file

    seen_while_publishing: list[set[str]] = []
    publish = airflow_bridge.publish_experiment_dag

    def watched(experiment_id: int, source: Path | None = None, place_slots: object = None) -> bool:
        seen_while_publishing.append(set(build_dags(airflow_bridge.dags_folder())))
        return publish(experiment_id, source, place_slots)  # type: ignore[arg-type]

    monkeypatch.setattr(airflow_bridge, "publish_experiment_dag", watched)
    answer = airflow_db.create()
    assert answer.status_code == 200, answer.text
    experiment_id = answer.json()["experiment"]["id"]
    dag_id = experiment_dag_id(experiment_id)
    assert [dag_id in dags for dags in seen_while_publishing] == [False]
    folder = airflow_bridge.dags_folder()
    assert experiment_file(folder, experiment_id).is_file()
    assert not staged_experiment_file(folder, experiment_id).exists()
    assert dag_id in build_dags(folder)
    assert _serialized(dag_id) is not None


def test_a_staged_file_left_by_a_stopped_api_server_is_published_by_housekeeping(
    airflow_db: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from det_airflow.dagfactory import experiment_file, staged_experiment_file
    from det_airflow.master import housekeeping

    first = airflow_db.create().json()["experiment"]["id"]
    folder = airflow_bridge.dags_folder()
    # As if the API server had stopped after the commit, before publishing: the file still staged.
    os.replace(experiment_file(folder, first), staged_experiment_file(folder, first))
    assert housekeeping.run_job("publish left-staged experiments")
    assert staged_experiment_file(folder, first).exists()  # a create in flight elsewhere: left to it
    old = staged_experiment_file(folder, first).stat().st_mtime - 120
    os.utime(staged_experiment_file(folder, first), (old, old))
    assert housekeeping.run_job("publish left-staged experiments")
    assert experiment_file(folder, first).is_file()
    assert not staged_experiment_file(folder, first).exists()


def test_the_master_starts_the_one_run_with_the_dag_and_links_it(airflow_db: Creator) -> None:
    """The master starts a `det experiment create` DAG's one run as it writes the DAG, and links the
    experiment to it at once; the DAG has no schedule, so the scheduler has no run of its own to
    make (a `@once` run made by both at once stopped the scheduler on a duplicate key)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    answer = airflow_db.create()
    assert answer.status_code == 200, answer.text
    experiment_id = answer.json()["experiment"]["id"]
    dag_id = experiment_dag_id(experiment_id)
    with settings.Session() as session:  # type: ignore[misc]
        runs = session.execute(
            select(DagRun.run_id, DagRun.run_type, DagRun.state).where(DagRun.dag_id == dag_id)
        ).all()
        dag_model = session.get(DagModel, dag_id)
        assert dag_model is not None
        assert dag_model.next_dagrun_create_after is None
    assert runs == [(f"det__exp_{experiment_id}", DagRunType.MANUAL, DagRunState.QUEUED)]
    assert _linked_run(airflow_db, experiment_id) == f"det__exp_{experiment_id}"
    waiting = airflow_bridge.slots_waiting_for_trials({dag_id: None})
    assert waiting[dag_id][1] == airflow_bridge.WaitingSlots(unstarted=[0])


def test_a_run_that_cannot_start_with_its_dag_is_started_by_housekeeping(
    airflow_db: Creator, caplog: pytest.LogCaptureFixture
) -> None:
    """No log template (a database `airflow db migrate` did not write): the run cannot be made; the
    DAG is written all the same, and housekeeping starts the run once it can, exactly once."""
    from airflow.models.dagrun import DagRun

    from det_airflow.master import housekeeping

    with settings.Session() as session:  # type: ignore[misc]
        session.execute(delete(LogTemplate))
        session.commit()
    with caplog.at_level(logging.WARNING, logger="det_airflow.master.airflow_bridge"):
        answer = airflow_db.create()
    assert answer.status_code == 200, answer.text
    experiment_id = answer.json()["experiment"]["id"]
    dag_id = experiment_dag_id(experiment_id)
    assert f"could not start DAG {dag_id}'s run now; housekeeping will" in caplog.text
    assert _serialized(dag_id) is not None
    with settings.Session() as session:  # type: ignore[misc]
        assert session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)).all() == []
        session.add(LogTemplate(filename="{{ ti.task_id }}.log", elasticsearch_id="{{ ti.task_id }}"))
        session.commit()
    assert housekeeping.run_job(housekeeping.START_EXPERIMENT_RUNS)
    assert housekeeping.run_job(housekeeping.START_EXPERIMENT_RUNS)  # nothing more to start
    with settings.Session() as session:  # type: ignore[misc]
        runs = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == dag_id)).all()
    assert runs == [f"det__exp_{experiment_id}"]
    assert _linked_run(airflow_db, experiment_id) == f"det__exp_{experiment_id}"


def test_a_run_failed_or_deleted_before_any_trial_asked_ends_the_experiment(airflow_db: Creator) -> None:
    """The experiment is linked to its run from the start: a run that fails (or is deleted) in Airflow
    before any trial slot asked for a trial ends the experiment ERROR, naming why, instead of leaving
    it ACTIVE with nothing running."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState
    from sqlalchemy import update

    from det_airflow.master import housekeeping

    ids = []
    for _ in range(2):
        answer = airflow_db.create()
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["experiment"]["id"])
    failed, deleted = ids
    with settings.Session() as session:  # type: ignore[misc]
        session.execute(
            update(DagRun).where(DagRun.dag_id == experiment_dag_id(failed)).values(state=DagRunState.FAILED)
        )
        session.execute(delete(DagRun).where(DagRun.dag_id == experiment_dag_id(deleted)))
        session.commit()
    assert housekeeping.run_job("end experiments ended in Airflow", airflow_db.people.db)
    for experiment_id, why in (
        (failed, f"its DAG run 'det__exp_{failed}' was ended in Airflow before the experiment ended"),
        (deleted, f"its DAG run 'det__exp_{deleted}' is gone from Airflow (deleted through its API or UI)"),
    ):
        experiment = airflow_db.people.call("alice", "GET", f"/experiments/{experiment_id}").json()[
            "experiment"
        ]
        assert experiment["state"] == "ERROR"
        assert why in experiment["error"]
