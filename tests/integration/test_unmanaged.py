"""A Determined ``core_v2`` program run by hand, outside Airflow, reports to the real master as an
unmanaged experiment that the `det` CLI shows and drives."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow import compat
from tests.integration.det_env import REPO, DetEnv

pytestmark = pytest.mark.integration

CORE_API = REPO / "examples" / "determined_tutorials" / "core_api"


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def _run_by_hand(det: DetEnv, folder: Path, program: str) -> subprocess.CompletedProcess[str]:
    """``python3 PROGRAM`` on the user's machine: DET_MASTER and a login, no trial."""
    env = {
        **det.env(),
        "PYTHONPATH": os.pathsep.join([str(compat.determined_root()), str(REPO)]),
    }
    return subprocess.run(
        [sys.executable, program], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def _experiment_named(det: DetEnv, name: str) -> dict:
    matches = [e for e in det.get("/experiments")["experiments"] if e["name"] == name]
    assert len(matches) == 1, matches
    return matches[0]


def test_an_unmanaged_run_is_an_experiment_the_cli_shows(det: DetEnv) -> None:
    result = _run_by_hand(det, CORE_API, "core_v2_unmanaged.py")
    assert result.returncode == 0, result.stdout + result.stderr

    experiment = _experiment_named(det, "unmanaged-weight-fit")
    experiment_id = experiment["id"]
    assert (experiment["state"], experiment["owner"], experiment["dag_id"]) == (
        "COMPLETED",
        det.af.admin_user,
        None,
    )
    listed = det.det("experiment", "list").stdout
    assert "unmanaged-weight-fit" in listed and "COMPLETED" in listed
    described = det.det("experiment", "describe", str(experiment_id)).stdout
    assert "unmanaged-weight-fit" in described
    trials = det.det("experiment", "list-trials", str(experiment_id)).stdout
    assert "COMPLETED" in trials
    trial_id = det.get(f"/experiments/{experiment_id}/trials")["trials"][0]["id"]
    training = det.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]
    assert [m["steps_completed"] for m in training] == list(range(1, 21))
    logs = det.det("trial", "logs", str(trial_id)).stdout
    assert f"unmanaged run started by {det.af.admin_user}" in logs and "core_v2_unmanaged.py" in logs
    # What the program logged (logging.basicConfig before core_v2.init) is in its trial's logs.
    assert "core_v2: reporting to " in logs, logs

    paused = det.det("experiment", "pause", str(experiment_id), check=False)
    assert paused.returncode == 1
    assert "is unmanaged" in paused.stderr + paused.stdout
    assert "Traceback" not in paused.stderr

    det.det("experiment", "delete", "--yes", str(experiment_id))
    assert all(e["id"] != experiment_id for e in det.get("/experiments?all=true")["experiments"])


def test_an_unmanaged_run_that_raises_ends_in_error(det: DetEnv, tmp_path: Path) -> None:
    (tmp_path / "diverges.py").write_text(
        "from determined.experimental import core_v2\n"
        "core_v2.init(defaults=core_v2.DefaultConfig(name='unmanaged-diverges', hparams={'lr': 10}))\n"
        "core_v2.train.report_training_metrics(steps_completed=1, metrics={'loss': 3.0})\n"
        "raise ValueError('loss became NaN')\n"
    )
    result = _run_by_hand(det, tmp_path, "diverges.py")
    assert result.returncode == 1
    assert "ValueError: loss became NaN" in result.stderr

    experiment = _experiment_named(det, "unmanaged-diverges")
    assert (experiment["state"], experiment["error"]) == ("ERROR", "ValueError: loss became NaN")
    described = det.det("experiment", "describe", str(experiment["id"])).stdout
    assert "ERROR" in described


def test_a_distributed_unmanaged_run_is_one_experiment_with_every_rank_in_its_logs(
    det: DetEnv, tmp_path: Path
) -> None:
    (tmp_path / "ddp.py").write_text(
        "import determined as det\n"
        "from determined.experimental import core_v2\n"
        "distributed = det.core.DistributedContext.from_torch_distributed()\n"
        "core_v2.init(defaults=core_v2.DefaultConfig(name='unmanaged-ddp'), distributed=distributed)\n"
        "rank = core_v2.distributed.rank\n"
        "print(f'rank {rank} starts')\n"
        "for step in (1, 2, 3):\n"
        "    core_v2.train.report_training_metrics(steps_completed=step, metrics={'loss': rank + 1 / step})\n"
        "core_v2.close()\n"
    )
    env = {
        **det.env(),
        "PYTHONPATH": os.pathsep.join([str(compat.determined_root()), str(REPO)]),
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "ddp.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    experiment = _experiment_named(det, "unmanaged-ddp")
    assert experiment["state"] == "COMPLETED"
    [trial] = det.get(f"/experiments/{experiment['id']}/trials")["trials"]
    training = det.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    assert [(m["steps_completed"], m["metrics"]["loss"]) for m in training] == [
        (1, 1.0),
        (2, 0.5),
        (3, 1 / 3),
    ]
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert "[rank=0] || INFO: rank 0 starts" in logs and "[rank=1] || INFO: rank 1 starts" in logs, logs
    only_rank_1 = det.det("trial", "logs", "--rank-id", "1", str(trial["id"])).stdout
    assert "rank 1 starts" in only_rank_1 and "rank 0 starts" not in only_rank_1, only_rank_1
