"""``core_v2.url_reverse_webui_exp_view()``: the web UI page of the run's experiment, as Determined's
``features/unmanaged`` examples print it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from det_airflow import trial_env
from det_airflow.api.user import store_login
from det_airflow.errors import DetError
from det_airflow.experimental import core_v2
from det_airflow.master.db import Database


def test_an_unmanaged_run_gets_its_experiments_page_on_the_master(master: tuple[str, Database]) -> None:
    url, _ = master
    store_login(url, "alice", "alice-token")
    core_v2.init(defaults=core_v2.DefaultConfig(name="unmanaged-3"))
    try:
        assert core_v2.info is not None
        experiment_id = core_v2.info.trial.experiment_id
        page = core_v2.url_reverse_webui_exp_view()
    finally:
        core_v2.close()
    assert page == f"{url}/det/ui/#/experiments/{experiment_id}"
    # The page's experiment is the run's, as its owner sees it through the master.
    answer = httpx.get(
        f"{url}/det/api/v1/experiments/{experiment_id}", headers={"Authorization": "Bearer alice-token"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["experiment"]["name"] == "unmanaged-3"


def test_a_run_without_a_master_gets_its_local_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # As `det experiment create --local` runs a trial: the trial's variables, no master.
    for name in (trial_env.MASTER, trial_env.EXPERIMENT_CONFIG_FILE, trial_env.EXPERIMENT_CONFIG):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(trial_env.TRIAL_ID, "1")
    monkeypatch.setenv(trial_env.LOCAL_STORE, str(tmp_path / "store"))
    core_v2.init(unmanaged=False)
    try:
        assert core_v2.url_reverse_webui_exp_view() == (tmp_path / "store").as_uri()
    finally:
        core_v2.close()


def test_before_init_it_says_to_call_init() -> None:
    with pytest.raises(
        DetError, match=r"^core_v2.url_reverse_webui_exp_view\(\): call core_v2.init\(\) first$"
    ):
        core_v2.url_reverse_webui_exp_view()
