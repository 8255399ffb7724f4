"""A Core API program written for Determined (`import determined`) runs unchanged on a real Airflow."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.det_env import REPO, DetEnv, kept_checkpoints

pytestmark = pytest.mark.integration

CORE_API = REPO / "examples" / "determined_tutorials" / "core_api"


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def test_a_determined_core_api_program_runs_unchanged(det: DetEnv) -> None:
    experiment_id = det.create(CORE_API / "2_checkpoints.yaml", CORE_API)

    waited = det.det("experiment", "wait", str(experiment_id), timeout=600)
    assert "COMPLETED" in waited.stdout, waited.stdout + waited.stderr
    trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"]
    trial_id = trials[0]["id"]
    validation = det.get(f"/trials/{trial_id}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [10, 20, 30, 40, 50]
    assert validation[-1]["metrics"]["error"] < 0.1
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    kept_checkpoints(checkpoints)

    logs = det.det("trial", "logs", str(trial_id)).stdout
    assert "import determined: det-airflow's implementation of Determined's training API runs" in logs
