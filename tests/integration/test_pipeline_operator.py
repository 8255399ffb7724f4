"""A user's own DAG runs an experiment with DetExperimentOperator on a real Airflow and PostgreSQL:
the task waits deferred while the experiment runs to COMPLETED, and the next task receives the best
checkpoint's uuid; ``run_experiment()`` in a ``@task`` of the same DAG returns what the operator does."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.det_env import DetEnv

pytestmark = pytest.mark.integration

TRAIN = """\
import det_airflow as det

with det.core.init() as core_context:
    loss = core_context.info.trial.hparams["loss"]
    for op in core_context.searcher.operations():
        core_context.train.report_validation_metrics(op.length, {"validation_loss": loss})
        with core_context.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "done").write_text("yes")
        op.report_progress(op.length)
        op.report_completed(loss)
"""

PIPELINE = """\
from airflow.sdk import DAG, task

from det_airflow.operators.pipeline import DetExperimentOperator, run_experiment

with DAG("{dag_id}", schedule=None, is_paused_upon_creation=False, catchup=False):
    train = DetExperimentOperator(
        task_id="train", config="{config}", experiment_owner="alice", poll_interval=1
    )

    @task
    def evaluate(outcome):
        print("evaluating checkpoint", outcome["best_checkpoint_uuid"], flush=True)
        return outcome["best_checkpoint_uuid"]

    evaluated = evaluate(train.output)

    @task
    def train_inline():
        return run_experiment({inline!r}, context_dir="pipeline_code", experiment_owner="bob", poll_interval=1)

    evaluated >> train_inline()
"""
# Run by run_experiment() in a @task after the operator's: a dict config, its context named
# relative to the DAG file.
INLINE = {
    "name": "pipeline-inline",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"loss": 0.3},
    "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 2}},
    "max_restarts": 0,
}


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def test_a_pipeline_task_waits_deferred_and_hands_on_the_best_checkpoint(det: DetEnv, airflow_api) -> None:
    dags = det.af.dags_folder
    assert dags is not None
    code = dags / "pipeline_code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    config = {
        "name": "pipeline-grid",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"loss": {"type": "categorical", "vals": [0.7, 0.2]}},
        "searcher": {"name": "grid", "metric": "validation_loss", "max_length": {"batches": 4}},
        "max_restarts": 0,
    }
    # Dropped under dags/, it is also DAG det_grid; the pipeline runs it by its path instead.
    (code / "grid.yaml").write_text(yaml.safe_dump(config))
    dag_id = "user_pipeline"
    (dags / f"{dag_id}.py").write_text(
        textwrap.dedent(PIPELINE).format(dag_id=dag_id, config="pipeline_code/grid.yaml", inline=INLINE)
    )
    airflow_api.wait_for_dag(dag_id)
    run_id = airflow_api.trigger(dag_id)

    seen_deferred = False
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = airflow_api.task_instances(dag_id, run_id)
        seen_deferred |= states.get("train") == "deferred"
        if (
            states.get("evaluate") in ("success", "failed", "upstream_failed")
            or states.get("train") == "failed"
        ):
            break
        time.sleep(0.5)
    finished = airflow_api.wait_for_run(dag_id, run_id, timeout=300)
    assert finished["state"] == "success", finished["tis"]
    assert seen_deferred, "the train task never waited deferred"

    entries = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    outcome = (
        airflow_api.http.get(f"{entries}/train/xcomEntries/return_value").raise_for_status().json()["value"]
    )
    experiment_id = outcome["experiment_id"]
    experiment = det.get(f"/experiments/{experiment_id}")["experiment"]
    assert (experiment["state"], experiment["owner"], outcome["state"]) == ("COMPLETED", "alice", "COMPLETED")
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    best = min(checkpoints, key=lambda c: c["validation_metric"])
    assert (outcome["best_checkpoint_uuid"], outcome["best_metric"]) == (best["uuid"], pytest.approx(0.2))
    assert outcome["best_checkpoint_uri"] == Path(best["storage"]["path"]).as_uri()
    received = airflow_api.http.get(f"{entries}/evaluate/xcomEntries/return_value").raise_for_status().json()
    assert received["value"] == best["uuid"]
    links = airflow_api.http.get(f"{entries}/train/links").raise_for_status().json()["extra_links"]
    assert links["Determined experiment"] == f"/det/ui/#/experiments/{experiment_id}"

    inline = (
        airflow_api.http.get(f"{entries}/train_inline/xcomEntries/return_value")
        .raise_for_status()
        .json()["value"]
    )
    inline_id = inline["experiment_id"]
    assert inline_id != experiment_id
    experiment = det.get(f"/experiments/{inline_id}")["experiment"]
    assert (experiment["name"], experiment["owner"]) == ("pipeline-inline", "bob")
    (checkpoint,) = det.get(f"/experiments/{inline_id}/checkpoints")["checkpoints"]
    assert inline == {
        "experiment_id": inline_id,
        "state": "COMPLETED",
        "best_checkpoint_uuid": checkpoint["uuid"],
        "best_metric": pytest.approx(0.3),
        "best_checkpoint_uri": Path(checkpoint["storage"]["path"]).as_uri(),
        "metric": "validation_loss",
    }
    pushed = airflow_api.http.get(f"{entries}/train_inline/xcomEntries/experiment_id").raise_for_status()
    assert pushed.json()["value"] == inline_id
