"""Training programs written for Determined (``import determined``, examples/determined_tutorials) run
unchanged: under ``det experiment create --local --test-mode`` and as plain processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from det_airflow import compat, trial_env
from det_airflow.cli.main import main

pytest.importorskip("torch")
pytest.importorskip("sklearn")

TUTORIALS = Path(__file__).resolve().parents[3] / "examples" / "determined_tutorials"
CORE_API = TUTORIALS / "core_api"
DIGITS = TUTORIALS / "pytorch_digits"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DET_MASTER", "DET_USER", "DET_PASS", trial_env.LOCAL_STORE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a failed local test keeps its folder there
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")


def _checks(out: str) -> dict[str, str]:
    """The local test's table as {check: found}."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) == 3 and cells[0] != "Check":
            rows[cells[0]] = cells[1]
    return rows


@pytest.mark.parametrize(
    ("program", "training", "validation", "checkpoints"),
    [
        ("0_start", "0 reports", "0 reports", "0"),
        ("1_metrics", "5 reports", "5 reports", "0"),
        # Test mode ends the loop at its first preemption check, after one report and checkpoint.
        ("2_checkpoints", "1 report", "1 report", "1"),
        ("3_hpsearch", "1 report", "1 report", "1"),
        ("core_v2_unmanaged", "20 reports", "0 reports", "0"),
    ],
)
def test_core_api_tutorials_pass_local_test_mode(
    capfd: pytest.CaptureFixture[str], program: str, training: str, validation: str, checkpoints: str
) -> None:
    code = main(["e", "create", "--local", "--test-mode", str(CORE_API / f"{program}.yaml"), str(CORE_API)])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert compat.determined_notice() in out
    checks = _checks(out)
    assert (checks["Training metrics"], checks["Validation metrics"], checks["Checkpoints"]) == (
        training,
        validation,
        checkpoints,
    )


def test_the_distributed_tutorial_starts_one_worker_per_slot(capfd: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["e", "create", "--local", "--test-mode", str(CORE_API / "4_distributed.yaml"), str(CORE_API)]
    )
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "training with 2 workers" in out + err  # slots_per_trial: 2
    assert _checks(out)["Validation metrics"] == "1 report"


@pytest.mark.parametrize("config", ["const.yaml", "distributed.yaml", "legacy.yaml"])
def test_the_pytorch_trial_passes_local_test_mode(capfd: pytest.CaptureFixture[str], config: str) -> None:
    code = main(["e", "create", "--local", "--test-mode", str(DIGITS / config), str(DIGITS)])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    checks = _checks(out)
    assert (checks["Training metrics"], checks["Validation metrics"], checks["Checkpoints"]) == (
        "1 report",
        "1 report",
        "1",
    )
    assert "validation: accuracy" in out + err  # the trial's PyTorchCallback ran


def _run_plain(folder: Path, store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python3 PROGRAM`` off-cluster, with ``determined`` resolving as a trial's would."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(compat.determined_root()), str(Path(__file__).parents[3])]),
        trial_env.LOCAL_STORE: str(store),
    }
    return subprocess.run(
        [sys.executable, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def _metrics(store: Path, group: str) -> list[dict]:
    lines = (store / "metrics.jsonl").read_text().splitlines()
    return [record for line in lines if (record := json.loads(line))["group"] == group]


def test_a_core_api_tutorial_runs_as_a_plain_process(tmp_path: Path) -> None:
    result = _run_plain(CORE_API, tmp_path / "store", "2_checkpoints.py")
    assert result.returncode == 0, result.stderr
    assert [r["steps_completed"] for r in _metrics(tmp_path / "store", "validation")] == [10, 20, 30, 40, 50]
    assert _metrics(tmp_path / "store", "validation")[-1]["metrics"]["error"] < 0.1


def test_the_distributed_tutorial_runs_under_determineds_launcher_path(tmp_path: Path) -> None:
    result = _run_plain(
        CORE_API,
        tmp_path / "store",
        *("-m", "determined.launch.torch_distributed", "--nproc_per_node", "2", "--"),
        *(sys.executable, "4_distributed.py"),
    )
    assert result.returncode == 0, result.stderr
    assert {r["metrics"]["workers"] for r in _metrics(tmp_path / "store", "validation")} == {2}


def test_an_unmanaged_core_v2_run_writes_the_local_store(tmp_path: Path) -> None:
    result = _run_plain(CORE_API, tmp_path / "store", "core_v2_unmanaged.py")
    assert result.returncode == 0, result.stderr
    assert [r["steps_completed"] for r in _metrics(tmp_path / "store", "training")] == list(range(1, 21))


def test_the_pytorch_trial_trains_as_a_plain_process(tmp_path: Path) -> None:
    result = _run_plain(DIGITS, tmp_path / "store", "train.py")
    assert result.returncode == 0, result.stderr
    validation = [r["metrics"] for r in _metrics(tmp_path / "store", "validation")]
    assert [m["epochs"] for m in validation] == [1, 2]
    assert validation[-1]["accuracy"] > 0.5  # it learns: chance is 0.1
    assert "validation: accuracy" in result.stdout
