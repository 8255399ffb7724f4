"""The finished experiment's Asset event, against the real master app on SQLite over HTTP: the
finalize task of a built experiment DAG names the experiment, its best checkpoint's URI and metric in
the event's ``extra``, which is what a downstream DAG reads from ``triggering_asset_events``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.context import OutletEventAccessors
from sqlalchemy import update

from det_airflow.api.pipeline import PipelineClient
from det_airflow.dagfactory import build_dags, experiment_file
from det_airflow.lineage import LineageDataset, experiment_inputs, experiment_outputs
from det_airflow.master import schema
from tests.unit.master.creating import Creator, creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master  # noqa: F401

CONFIG = """\
name: mnist
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
data: {train: "s3://data/mnist/train", note: "not a url"}
"""


@pytest.fixture
def url(master: tuple[People, str], monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT",
        f'{{"conn_type": "det", "host": "{master[1]}", "password": "{SERVICE_TOKEN}"}}',
    )
    return master[1]


def _finished(app: People, state: str, losses: dict[str, float]) -> tuple[int, dict[str, Path]]:
    e = app.add_experiment(owner="alice", state=state)
    t = app.add_trial(e, state="COMPLETED")
    folders = {}
    for uuid, loss in losses.items():
        folders[uuid] = app.add_checkpoint(t, uuid)
        with app.db.begin() as conn:
            conn.execute(
                update(schema.checkpoints)
                .where(schema.checkpoints.c.uuid == uuid)
                .values(validation_metric=loss)
            )
    return e, folders


def _finalize_task(dags_folder: Path, experiment_id: int) -> Any:
    path = experiment_file(dags_folder, experiment_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CONFIG)
    dag: Any = build_dags(dags_folder)[f"det_exp_{experiment_id}"]
    return dag.task_dict["finalize"]


def test_a_completed_experiment_s_event_names_it_and_its_best_checkpoint(
    master: tuple[People, str],  # noqa: F811
    url: str,
    tmp_path: Path,
) -> None:
    app, _ = master
    e, folders = _finished(app, "COMPLETED", {"c-high": 0.9, "c-low": 0.1})
    finalize = _finalize_task(tmp_path / "dags", e)
    (outlet,) = finalize.outlets
    assert outlet == Asset(f"det://experiments/det_exp_{e}", group="det")
    events = OutletEventAccessors()

    returned = finalize.execute({"outlet_events": events})

    extra: dict[str, Any] = {
        "experiment_id": e,
        "state": "COMPLETED",
        "best_checkpoint_uuid": "c-low",
        "best_checkpoint_uri": folders["c-low"].as_uri(),
        "metric": "loss",
        "value": 0.1,
    }
    assert events[outlet].extra == extra
    assert extra["best_checkpoint_uri"].startswith("file:///")
    assert returned["best_checkpoint"] == "c-low"
    # OpenLineage: the data section's URL in, the best checkpoint out (no context packed here).
    assert experiment_inputs(finalize.lineage_data, None) == [LineageDataset("s3://data", "mnist/train")]
    assert experiment_outputs([returned["best_checkpoint_uri"]]) == [
        LineageDataset("file", str(folders["c-low"]))
    ]


def test_an_experiment_that_did_not_complete_fails_the_task_and_emits_no_extra(
    master: tuple[People, str],  # noqa: F811
    url: str,
    tmp_path: Path,
) -> None:
    app, _ = master
    e, _ = _finished(app, "ERROR", {"c-only": 0.4})
    finalize = _finalize_task(tmp_path / "dags", e)
    events = OutletEventAccessors()

    with pytest.raises(AirflowFailException, match=f"experiment {e} ended ERROR"):
        finalize.execute({"outlet_events": events})
    assert events[finalize.outlets[0]].extra == {}


def test_the_pipeline_outcome_carries_the_best_checkpoint_uri(
    master: tuple[People, str],  # noqa: F811
    url: str,
) -> None:
    app, _ = master
    e, folders = _finished(app, "COMPLETED", {"c-a": 0.3, "c-b": 0.2})

    outcome = PipelineClient(url, SERVICE_TOKEN).outcome(e)

    assert (outcome.best_checkpoint_uuid, outcome.best_checkpoint_uri) == ("c-b", folders["c-b"].as_uri())
    assert outcome.as_xcom()["best_checkpoint_uri"] == folders["c-b"].as_uri()
