"""The DAG factory: experiment YAMLs under the DAGs folder → experiment DAGs (no database needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("airflow")

from det_airflow.dagfactory import build_dags  # noqa: E402

CONST = """
name: digits
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
resources: {slots_per_trial: 2, priority: 10, resource_pool: gpus}
max_restarts: 3
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_dropped_yaml_becomes_dag_named_after_its_stem_with_the_experiment_shape(tmp_path: Path) -> None:
    write(tmp_path / "digits" / "const.yaml", CONST)

    dags = build_dags(tmp_path)

    dag = dags["det_const"]
    assert set(dag.task_dict) == {"register", "searcher", "trial", "finalize"}
    # register → searcher → trial → finalize (register's XCom, the experiment id, also feeds the others)
    assert dag.task_dict["searcher"].upstream_task_ids == {"register"}
    assert dag.task_dict["trial"].upstream_task_ids == {"register", "searcher"}
    assert dag.task_dict["finalize"].upstream_task_ids == {"register", "trial"}
    assert type(dag.timetable).__name__ == "NullTimetable"  # runs when triggered
    assert dag.task_dict["register"].experiment_id is None
    assert dag.task_dict["finalize"].trigger_rule == "all_done"


def test_trial_task_carries_the_experiments_pool_slots_priority_and_restarts(tmp_path: Path) -> None:
    write(tmp_path / "const.yaml", CONST)

    trial = build_dags(tmp_path)["det_const"].task_dict["trial"]

    kwargs = trial.partial_kwargs
    assert kwargs["pool"] == "gpus"
    assert kwargs["pool_slots"] == 2
    assert kwargs["priority_weight"] == 90  # priority 10: lower runs first
    assert kwargs["weight_rule"] == "absolute"
    assert kwargs["retries"] == 3


def test_master_written_config_runs_once_for_its_experiment(tmp_path: Path) -> None:
    write(tmp_path / "experiments" / "exp_12.yaml", CONST)

    dag = build_dags(tmp_path)["det_exp_12"]

    assert dag.task_dict["register"].experiment_id == 12
    assert "Once" in type(dag.timetable).__name__


def test_other_yaml_files_are_left_alone(tmp_path: Path) -> None:
    write(tmp_path / "notes.yaml", "just: data\n")
    write(tmp_path / "broken_other.yaml", "a: [\n")

    assert build_dags(tmp_path) == {}


def test_invalid_experiment_yaml_is_reported_and_the_others_still_load(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", CONST)
    write(tmp_path / "bad.yaml", "entrypoint: x\nsearcher: {name: random, metric: loss, max_trials: ten}\n")

    dags = build_dags(tmp_path)

    assert "det_good" in dags
    with pytest.raises(
        Exception, match=r"bad\.yaml: searcher\.max_trials: expected an integer >= 1, got 'ten'"
    ):
        dags["det_invalid_experiments"].validate()


def test_a_task_process_builds_only_its_own_dag(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", CONST)
    write(tmp_path / "b.yaml", CONST)
    write(tmp_path / "c.yaml", "entrypoint: x\nsearcher: {name: pbt, metric: loss}\n")

    assert list(build_dags(tmp_path, only_dag_id="det_b")) == ["det_b"]
