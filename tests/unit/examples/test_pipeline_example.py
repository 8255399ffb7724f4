"""examples/pipeline/: the DAG users drop in parses, runs its steps in order on the Asset, and its
experiment is a valid ASHA config."""

from __future__ import annotations

import runpy
from pathlib import Path

from airflow.sdk import Asset

from det_airflow.config import parse_config
from det_airflow.operators.pipeline import DetExperimentOperator

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pipeline" / "pipeline_dag.py"


def test_the_example_pipeline_runs_its_steps_in_order_when_its_asset_updates() -> None:
    ns = runpy.run_path(str(EXAMPLE))
    dag = ns["dag"]

    assert list(dag.timetable.asset_condition.objects) == [Asset("det-example://training-data")]
    order = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert order == {"prepare_data": ["train"], "train": ["evaluate"], "evaluate": ["publish"], "publish": []}
    train = dag.get_task("train")
    assert isinstance(train, DetExperimentOperator)
    assert (Path(train.context_dir) / "train.py").is_file()
    assert parse_config(train.config).searcher.name == "adaptive_asha"


def test_airflow_imports_the_example_folder_without_errors() -> None:
    """What Airflow's DAG processor does with the folder dropped into its DAGs folder."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=EXAMPLE.parent, load_op_links=True)

    assert bag.import_errors == {}
    assert sorted(bag.dags) == ["det_pipeline_example"]
    assert bag.dags["det_pipeline_example"].get_task("train").operator_extra_links
