"""The `[det]` defaults of airflow.cfg that the README promises: `checkpoint_storage_path` for experiments
without their own `checkpoint_storage`, and `trial_work_dir` for local trials' work folders. Set in
airflow.cfg or, as Airflow allows for every setting, as `AIRFLOW__DET__*` environment variables."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from det_airflow.operators.trial import default_work_dir
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

NO_STORAGE = textwrap.dedent(
    """\
    name: tiny
    entrypoint: python3 train.py
    searcher: {name: single, metric: loss, max_length: {batches: 10}}
    """
)


def stored_storage(
    creator: Creator, people: People, config: str = NO_STORAGE, keys: tuple[str, ...] = ("type", "host_path")
) -> dict[str, object]:
    """``keys`` of the checkpoint storage the stored experiment uses."""
    answer = creator.create(config=config)
    assert answer.status_code == 200, answer.text
    storage = people.experiment(answer.json()["experiment"]["id"]).config["checkpoint_storage"]
    return {k: v for k, v in storage.items() if k in keys}


@pytest.fixture
def no_det_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An AIRFLOW_HOME of our own and no `[det]` settings from the environment."""
    home = tmp_path / "airflow-home"
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    for name in ("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", "AIRFLOW__DET__TRIAL_WORK_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_checkpoints_default_to_det_checkpoints_under_airflow_home(
    creator: Creator, people: People, no_det_settings: Path
) -> None:
    storage = stored_storage(creator, people)
    assert storage == {"type": "shared_fs", "host_path": str(no_det_settings / "det-checkpoints")}


def test_checkpoint_storage_path_is_the_default_for_experiments_without_storage(
    creator: Creator, people: People, no_det_settings: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(tmp_path / "team-checkpoints"))
    storage = stored_storage(creator, people)
    assert storage == {"type": "shared_fs", "host_path": str(tmp_path / "team-checkpoints")}


def test_checkpoint_storage_path_expands_the_home_folder(
    creator: Creator, people: People, no_det_settings: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", "~/ckpt")
    assert stored_storage(creator, people)["host_path"] == str(tmp_path / "home" / "ckpt")


def test_an_experiments_own_settings_are_laid_over_the_default_path(
    creator: Creator, people: People, no_det_settings: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(tmp_path / "team-checkpoints"))
    config = NO_STORAGE + "checkpoint_storage: {save_trial_best: 2}\n"
    assert stored_storage(creator, people, config, ("type", "host_path", "save_trial_best")) == {
        "type": "shared_fs",
        "host_path": str(tmp_path / "team-checkpoints"),
        "save_trial_best": 2,
    }


def test_an_experiments_own_host_path_wins_over_the_default(
    creator: Creator, people: People, no_det_settings: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(tmp_path / "team-checkpoints"))
    # A folder outside the checkpoint root, which the admin's runner policy allows.
    monkeypatch.setenv("AIRFLOW__DET__ALLOWED_HOST_PATHS", str(tmp_path / "mine"))
    config = NO_STORAGE + f"checkpoint_storage: {{type: shared_fs, host_path: {tmp_path / 'mine'}}}\n"
    assert stored_storage(creator, people, config)["host_path"] == str(tmp_path / "mine")


def test_trial_work_folders_default_to_det_trials_under_airflow_home(no_det_settings: Path) -> None:
    assert default_work_dir() == no_det_settings / "det-trials"


def test_trial_work_dir_sets_where_trial_work_folders_go(
    no_det_settings: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_WORK_DIR", str(tmp_path / "trials"))
    assert default_work_dir() == tmp_path / "trials"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_WORK_DIR", "~/trials")
    assert default_work_dir() == tmp_path / "home" / "trials"
