"""det.get_cluster_info(): None off-cluster; on a trial, everything read from the DET_* environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import det_airflow as det
from det_airflow import trial_env
from det_airflow.cluster_info import cluster_info_from_env
from det_airflow.errors import DetError

CONFIG = {"searcher": {"name": "single", "metric": "loss"}, "data": {"bucket": "b", "secrets": {"k": "v"}}}
TRIAL_ENV = {
    trial_env.MASTER: "http://master:8080",
    trial_env.SESSION_TOKEN: "tok",
    trial_env.TRIAL_ID: "12",
    trial_env.EXPERIMENT_ID: "4",
    trial_env.TRIAL_SEED: "777",
    trial_env.HPARAMS: json.dumps({"lr": 0.01, "optimizer": {"name": "adam"}}),
    trial_env.EXPERIMENT_CONFIG: json.dumps(CONFIG),
    trial_env.LATEST_CHECKPOINT: "ckpt-uuid",
    trial_env.STEPS_COMPLETED: "300",
    trial_env.SLOT_IDS: "[0, 1]",
    trial_env.CHIEF_IP: "10.0.0.5",
    trial_env.CONTAINER_RANK: "1",
    trial_env.CONTAINER_ADDRS: json.dumps(["10.0.0.5", "10.0.0.6"]),
    trial_env.TASK_ID: "4.12",
    trial_env.ALLOCATION_ID: "4.12.2",
    trial_env.TRIAL_RUN_ID: "2",
}


def test_off_cluster_there_is_no_cluster_info(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TRIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    assert det.get_cluster_info() is None


def test_on_a_trial_every_field_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in TRIAL_ENV.items():
        monkeypatch.setenv(name, value)
    info = det.get_cluster_info()
    assert isinstance(info, det.ClusterInfo)
    assert info.master_url == "http://master:8080"
    assert info.session_token == "tok"
    assert (info.task_id, info.allocation_id) == ("4.12", "4.12.2")
    assert info.slot_ids == [0, 1]
    assert info.container_addrs == ["10.0.0.5", "10.0.0.6"]
    assert info.container_rank == 1
    assert info.latest_checkpoint == "ckpt-uuid"
    assert info.user_data == {"bucket": "b", "secrets": {"k": "v"}}
    trial = info.trial
    assert (trial.trial_id, trial.experiment_id, trial.trial_seed) == (12, 4, 777)
    assert trial.hparams == {"lr": 0.01, "optimizer": {"name": "adam"}}
    assert trial.config == CONFIG
    assert trial.steps_completed == 300
    assert trial.trial_run_id == 2


def test_a_local_trial_has_cluster_info_without_a_master() -> None:
    env = {k: v for k, v in TRIAL_ENV.items() if k not in (trial_env.MASTER, trial_env.SESSION_TOKEN)}
    info = cluster_info_from_env(env)
    assert info is not None and info.master_url is None and info.trial.hparams["lr"] == 0.01


def test_hparams_alone_make_a_trial_with_defaults() -> None:
    info = cluster_info_from_env({trial_env.HPARAMS: '{"lr": 0.5}'})
    assert info is not None
    assert info.trial.hparams == {"lr": 0.5}
    assert (info.trial.trial_id, info.trial.steps_completed, info.latest_checkpoint) == (0, 0, None)
    assert info.slot_ids == [] and info.container_addrs == ["127.0.0.1"] and info.user_data == {}


def test_empty_latest_checkpoint_means_none() -> None:
    info = cluster_info_from_env({trial_env.TRIAL_ID: "1", trial_env.LATEST_CHECKPOINT: ""})
    assert info is not None and info.latest_checkpoint is None


@pytest.mark.parametrize("slots, expected", [("[0,1]", [0, 1]), ("0,1", [0, 1]), ("3", [3]), ("", [])])
def test_slot_ids_accept_json_or_comma_lists(slots: str, expected: list[int]) -> None:
    info = cluster_info_from_env({trial_env.TRIAL_ID: "1", trial_env.SLOT_IDS: slots})
    assert info is not None and info.slot_ids == expected


def test_bad_json_is_a_clear_error() -> None:
    with pytest.raises(DetError, match="DET_HPARAMS: not valid JSON"):
        cluster_info_from_env({trial_env.TRIAL_ID: "1", trial_env.HPARAMS: "{lr: 1"})
    with pytest.raises(DetError, match="DET_TRIAL_ID: expected an integer"):
        cluster_info_from_env({trial_env.TRIAL_ID: "one"})


def test_the_config_is_read_from_the_file_the_environment_names(tmp_path: Path) -> None:
    path = tmp_path / "experiment_config.json"
    path.write_text(json.dumps(CONFIG))
    info = cluster_info_from_env({trial_env.TRIAL_ID: "1", trial_env.EXPERIMENT_CONFIG_FILE: str(path)})
    assert info is not None and info.trial.config == CONFIG and info.user_data == CONFIG["data"]


def test_the_config_file_alone_marks_a_trial(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONFIG))
    info = cluster_info_from_env({trial_env.EXPERIMENT_CONFIG_FILE: str(path)})
    assert info is not None and info.trial.config == CONFIG


def test_the_config_variable_still_wins_when_set(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"data": {"from": "file"}}))
    env = {
        trial_env.EXPERIMENT_CONFIG: json.dumps({"data": {"from": "variable"}}),
        trial_env.EXPERIMENT_CONFIG_FILE: str(path),
    }
    info = cluster_info_from_env(env)
    assert info is not None and info.user_data == {"from": "variable"}


def test_an_unreadable_or_broken_config_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(DetError, match=f"DET_EXPERIMENT_CONFIG_FILE: cannot read {missing}"):
        cluster_info_from_env({trial_env.EXPERIMENT_CONFIG_FILE: str(missing)})
    broken = tmp_path / "broken.json"
    broken.write_text("[1, 2]")
    with pytest.raises(DetError, match=f"file {broken}: expected a JSON object, got list"):
        cluster_info_from_env({trial_env.EXPERIMENT_CONFIG_FILE: str(broken)})


def test_det_master_alone_is_not_a_trial() -> None:
    # Determined users export DET_MASTER for the CLI; a script run in that shell is off-cluster.
    assert cluster_info_from_env({"DET_MASTER": "http://127.0.0.1:8080"}) is None
