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
from sqlalchemy import func, select

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
        session.commit()
    folder = airflow_bridge.dags_folder()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dags" / airflow_bridge.FACTORY_FILE, folder)
    yield creator


def _serialized(dag_id: str) -> SerializedDagModel | None:
    with settings.Session() as session:  # type: ignore[misc]
        return session.scalar(select(SerializedDagModel).where(SerializedDagModel.dag_id == dag_id))


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
        # Its one run is due at once: the scheduler's own query for DAGs needing a run lists it
        # now, not only from the next whole second on (SQLite's now() has no fraction).
        due, _ = DagModel.dags_needing_dagruns(session)
        assert dag_id in {m.dag_id for m in due}
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
