"""Adaptive search on a real Airflow and PostgreSQL: ASHA stops trials early and replaces them, stopped
trials free their slots, and the search carries on across a restart of the API server."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.det_env import EXAMPLE, DetEnv

pytestmark = pytest.mark.integration

MAX_LENGTH = 160


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def asha_config(tmp_path: Path, name: str, **searcher: object) -> Path:
    config = yaml.safe_load((EXAMPLE / "random.yaml").read_text())
    config["name"] = name
    config["searcher"] = {
        "name": "adaptive_asha",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_trials": 8,
        "max_length": {"batches": MAX_LENGTH},
        "divisor": 4,
        "max_rungs": 2,
        "max_concurrent_trials": 4,
        **searcher,
    }
    config["scheduling_unit"] = 40
    config["max_restarts"] = 0
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def pool_occupancy(det: DetEnv) -> dict[str, int]:
    with det.api() as client:
        pool = client.get("/api/v2/pools/default_pool").raise_for_status().json()
    return {k: pool[k] for k in ("running_slots", "queued_slots", "deferred_slots", "scheduled_slots")}


def test_asha_stops_trials_early_replaces_them_and_frees_their_slots(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(asha_config(tmp_path, "asha-integration"))

    answer = det.wait_experiment(experiment_id, timeout=900)

    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    trials = answer["trials"]
    assert len(trials) == 8
    assert {t["state"] for t in trials} == {"COMPLETED"}
    stopped = [t for t in trials if t["total_batches"] < MAX_LENGTH]
    finished = [t for t in trials if t["total_batches"] == MAX_LENGTH]
    assert stopped, "no trial was stopped early"
    assert finished, "no trial reached the top rung"
    # Stopped trials ended at their rung and exited cleanly (a checkpoint, no restart).
    for trial in stopped:
        assert trial["restarts"] == 0 and trial["latest_checkpoint"] is not None
    # Nothing is left holding a pool slot.
    assert pool_occupancy(det) == {
        "running_slots": 0,
        "queued_slots": 0,
        "deferred_slots": 0,
        "scheduled_slots": 0,
    }
    dag_id, run_id = answer["experiment"]["dag_id"], answer["experiment"]["dag_run_id"]
    with det.api() as client:
        tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
    trial_tis = [ti for ti in tis if ti["task_id"] == "trial"]
    assert len(trial_tis) == 8 and {ti["state"] for ti in trial_tis} == {"success"}


def test_search_survives_a_restart_of_the_api_server(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(asha_config(tmp_path, "asha-restart", max_concurrent_trials=2))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]
        if any(t["total_batches"] >= 40 for t in trials):
            break
        time.sleep(1)
    else:
        pytest.fail("no trial reported a validation")

    pid = det.af.status()["api-server"]
    assert pid
    os.killpg(os.getpgid(pid), signal.SIGTERM)
    for _ in range(60):
        if det.af.status()["api-server"] is None:
            break
        time.sleep(1)
    det.af.start()
    det.af.wait_ready(timeout=300)

    answer = det.wait_experiment(experiment_id, timeout=900)
    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    assert len(answer["trials"]) == 8  # the search went on where it was: no trial created twice
    assert [t["request_id"] for t in answer["trials"]] == list(range(1, 9))
