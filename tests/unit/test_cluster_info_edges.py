"""ClusterInfo when the environment gives only part of a trial's variables, and the exact messages of
a broken config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_airflow import trial_env
from det_airflow.cluster_info import cluster_info_from_env
from det_airflow.errors import DetError


def test_missing_ids_ranks_and_seed_are_zero_and_names_derive_from_them() -> None:
    info = cluster_info_from_env({trial_env.HPARAMS: "{}"})
    assert info is not None
    assert (info.trial.experiment_id, info.trial.trial_run_id, info.trial.trial_seed) == (0, 0, 0)
    assert info.container_rank == 0
    assert (info.task_id, info.allocation_id) == ("0.0", "0.0.0")


def test_task_and_allocation_ids_derive_from_the_experiment_trial_and_run() -> None:
    env = {trial_env.TRIAL_ID: "12", trial_env.EXPERIMENT_ID: "4", trial_env.TRIAL_RUN_ID: "3"}
    info = cluster_info_from_env(env)
    assert info is not None
    assert (info.task_id, info.allocation_id) == ("4.12", "4.12.3")


def test_a_config_file_that_is_not_json_is_named_in_the_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(DetError) as err:
        cluster_info_from_env({trial_env.EXPERIMENT_CONFIG_FILE: str(broken)})
    assert str(err.value).startswith(f"file {broken}: not valid JSON (")


def test_a_missing_config_file_says_why_in_words(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(DetError) as err:
        cluster_info_from_env({trial_env.EXPERIMENT_CONFIG_FILE: str(missing)})
    assert str(err.value) == (
        f"environment variable {trial_env.EXPERIMENT_CONFIG_FILE}: cannot read {missing} (No such file or directory)"
    )
