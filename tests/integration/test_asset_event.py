"""A finished experiment emits the Airflow Asset event `det://experiments/<dag_id>`, and a DAG that
schedules on that Asset runs, on a real Airflow and PostgreSQL; a YAML dropped into the DAGs folder
with ``airflow.schedule`` runs a new experiment on each event of its Asset."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.det_env import DetEnv, wait_until

pytestmark = pytest.mark.integration

TRAIN = """\
import det_airflow as det

with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        core_context.train.report_validation_metrics(op.length, {"validation_loss": 0.5})
        with core_context.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "done").write_text("yes")
        op.report_progress(op.length)
        op.report_completed(0.5)
"""

DOWNSTREAM = """\
from airflow.sdk import DAG, Asset, task

with DAG(
    "{dag_id}",
    schedule=[Asset("det://experiments/{source}")],
    is_paused_upon_creation=False,
    catchup=False,
):

    @task
    def read_the_event(triggering_asset_events=None):
        (event,) = triggering_asset_events[Asset("det://experiments/{source}")]
        print("downstream saw experiment", event.extra["experiment_id"], flush=True)
        return event.extra

    read_the_event()
"""

TRAINING_DATA = "det-test://training-data"
RETRAIN = {
    "name": "retrain",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 2}},
    "max_restarts": 0,
    "airflow": {"schedule": TRAINING_DATA},
}

EVERY_EVENT = """\
from airflow.sdk import DAG, Asset, task

with DAG(
    "{dag_id}",
    schedule=[Asset("det://experiments/{source}")],
    is_paused_upon_creation=False,
    catchup=False,
):

    @task
    def read_the_events(triggering_asset_events=None):
        return [event.extra for event in triggering_asset_events[Asset("det://experiments/{source}")]]

    read_the_events()
"""


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def test_a_dag_scheduled_on_the_experiments_asset_runs_when_it_completes(
    det: DetEnv, airflow_api, tmp_path: Path
) -> None:
    context = tmp_path / "tiny"
    context.mkdir()
    (context / "train.py").write_text(TRAIN)
    config = {
        "name": "asset-source",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 10}},
        "max_restarts": 0,
    }
    (context / "asset.yaml").write_text(yaml.safe_dump(config))
    # Paused, so the downstream DAG is parsed before the experiment can finish.
    experiment_id = det.create(context / "asset.yaml", context, "--paused")
    source = det.get(f"/experiments/{experiment_id}")["experiment"]["dag_id"]
    assert source == f"det_exp_{experiment_id}"
    downstream = f"after_{source}"
    assert det.af.dags_folder is not None
    (det.af.dags_folder / f"{downstream}.py").write_text(
        textwrap.dedent(DOWNSTREAM).format(dag_id=downstream, source=source)
    )
    airflow_api.wait_for_dag(downstream)
    det.det("experiment", "activate", str(experiment_id))

    answer = det.wait_experiment(experiment_id, timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    best = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    assert len(best) == 1

    def downstream_runs() -> list[dict]:
        runs = airflow_api.http.get(f"/api/v2/dags/{downstream}/dagRuns").raise_for_status().json()
        return list(runs["dag_runs"])

    (run,) = wait_until(downstream_runs, f"a run of {downstream} after experiment {experiment_id} completed")
    assert run["run_type"] == "asset_triggered"
    finished = airflow_api.wait_for_run(downstream, run["dag_run_id"], timeout=300)
    assert finished["state"] == "success", finished["tis"]

    events = (
        airflow_api.http.get("/api/v2/assets/events", params={"source_dag_id": source})
        .raise_for_status()
        .json()["asset_events"]
    )
    (event,) = events
    assert event["uri"] == f"det://experiments/{source}"
    assert event["extra"] == {
        "experiment_id": experiment_id,
        "state": "COMPLETED",
        "best_checkpoint_uuid": best[0]["uuid"],
        "best_checkpoint_uri": Path(best[0]["storage"]["path"]).as_uri(),
        "metric": "validation_loss",
        "value": 0.5,
    }
    assert [r["dag_id"] for r in event["created_dagruns"]] == [downstream]


def test_a_dropped_yaml_scheduled_on_an_asset_runs_a_new_experiment_on_each_event(
    det: DetEnv, airflow_api
) -> None:
    dags = det.af.dags_folder
    assert dags is not None
    folder = dags / "retrain"
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN)
    (folder / "retrain.yaml").write_text(yaml.safe_dump(RETRAIN))
    source, downstream = "det_retrain", "after_det_retrain"
    (dags / f"{downstream}.py").write_text(
        textwrap.dedent(EVERY_EVENT).format(dag_id=downstream, source=source)
    )
    airflow_api.wait_for_dag(source)
    airflow_api.wait_for_dag(downstream)
    (asset,) = (
        airflow_api.http.get("/api/v2/assets", params={"uri_pattern": TRAINING_DATA})
        .raise_for_status()
        .json()["assets"]
    )

    def runs(dag_id: str) -> list[dict]:
        answer = airflow_api.http.get(f"/api/v2/dags/{dag_id}/dagRuns").raise_for_status().json()
        return list(answer["dag_runs"])

    # One event at a time: an event joins a run not yet started, and two experiments of the DAG
    # finishing within the same instant may reach the downstream DAG as one run with one event.
    for count in (1, 2):
        before = frozenset(r["dag_run_id"] for dag_id in (source, downstream) for r in runs(dag_id))
        posted = airflow_api.http.post(
            "/api/v2/assets/events", json={"asset_id": asset["id"], "extra": {"version": count}}
        )
        assert posted.status_code in (200, 201), posted.text
        for dag_id in (source, downstream):

            def started(dag_id: str = dag_id, n: int = count, old: frozenset = before) -> list[dict]:
                current = runs(dag_id)
                return [r for r in current if r["dag_run_id"] not in old] if len(current) == n else []

            (run,) = wait_until(started, f"run {count} of {dag_id}")
            assert run["run_type"] == "asset_triggered"
            finished = airflow_api.wait_for_run(dag_id, run["dag_run_id"], timeout=300)
            assert finished["state"] == "success", finished["tis"]
    source_runs = runs(source)

    experiments = [e for e in det.get("/experiments?all=true")["experiments"] if e["dag_id"] == source]
    assert sorted(e["dag_run_id"] for e in experiments) == sorted(r["dag_run_id"] for r in source_runs)
    assert {e["state"] for e in experiments} == {"COMPLETED"}
    expected = []
    for experiment in sorted(experiments, key=lambda e: e["id"]):
        (checkpoint,) = det.get(f"/experiments/{experiment['id']}/checkpoints")["checkpoints"]
        expected.append(
            {
                "experiment_id": experiment["id"],
                "state": "COMPLETED",
                "best_checkpoint_uuid": checkpoint["uuid"],
                "best_checkpoint_uri": Path(checkpoint["storage"]["path"]).as_uri(),
                "metric": "validation_loss",
                "value": 0.5,
            }
        )

    # Each experiment's event reached the downstream DAG, which returned its extra.
    extras = []
    for run in sorted(runs(downstream), key=lambda r: r["run_after"]):
        path = f"/api/v2/dags/{downstream}/dagRuns/{run['dag_run_id']}/taskInstances/read_the_events"
        extras += airflow_api.http.get(f"{path}/xcomEntries/return_value").raise_for_status().json()["value"]
    assert extras == expected
