"""``import determined`` in a trial: det-airflow's modules under Determined's names, unless the real
package is installed."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from det_airflow import compat
from det_airflow.trial_process import TrialSpec, trial_environment

ALIAS = str(compat.determined_root())


def _python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ALIAS}
    return subprocess.run(
        [sys.executable, *args, *(["-c", code] if code else [])],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_determined_names_are_det_airflows() -> None:
    result = _python(
        "import determined as det, det_airflow\n"
        "from determined import core, pytorch\n"
        "from determined.experimental import core_v2\n"
        "from determined.common import util\n"
        "from determined.pytorch import TorchData, PyTorchCallback, MetricReducer, Trainer\n"
        "from determined.pytorch.experimental import TorchBatchProcessor, torch_batch_process\n"
        "import determined.launch.torch_distributed\n"
        "assert det.core.init is det_airflow.core.init\n"
        "assert pytorch.Trainer is det_airflow.pytorch.Trainer\n"
        "assert core_v2 is det_airflow.experimental.core_v2 is det.experimental.core_v2\n"
        "assert det.get_cluster_info() is None and det.InvalidHP is det_airflow.InvalidHP\n"
        "print(det.LOG_FORMAT)\n"
        "print(util.sizeof_fmt(1536), util.make_url('host:8080', '/api/v1'))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "%(levelname)s: [%(process)s] %(name)s: %(message)s",
        "1.5KB http://host:8080/api/v1",
    ]


def test_launch_modules_run_our_launchers() -> None:
    result = _python("", "-m", "determined.launch.wrap_rank", "3", sys.executable, "-c", "print('hello')")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[rank=3] hello\n"


def test_an_unknown_launcher_is_one_clear_line() -> None:
    result = _python("", "-m", "determined.launch.slurm_launcher")
    assert result.returncode == 1
    assert "No module named determined.launch.slurm_launcher" in result.stderr


def _spec(**config: object) -> TrialSpec:
    return TrialSpec(trial_id=1, experiment_id=1, request_id="1", trial_seed=0, config=dict(config))


def test_a_trial_gets_the_alias_when_determined_is_not_installed(tmp_path: Path) -> None:
    assert importlib.util.find_spec("determined") is None  # this environment has no Determined
    env = trial_environment(_spec(), workdir=tmp_path, base_env={})
    assert ALIAS in env["PYTHONPATH"].split(os.pathsep)
    assert compat.determined_notice() == (
        "import determined: det-airflow's implementation of Determined's training API runs"
    )


def _fake_determined(root: Path) -> Path:
    package = root / "determined"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("REAL = True\n")
    return root


def test_an_installed_determined_wins_and_the_notice_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _fake_determined(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    env = trial_environment(_spec(), workdir=tmp_path / "work", base_env={})
    assert ALIAS not in env["PYTHONPATH"].split(os.pathsep)
    assert compat.determined_notice() == (
        f"import determined: the installed Determined package runs ({site / 'determined'}), not det-airflow's"
    )


def test_a_determined_on_the_trials_own_path_wins(tmp_path: Path) -> None:
    mine = _fake_determined(tmp_path / "vendored")
    spec = _spec(environment={"environment_variables": [f"PYTHONPATH={mine}"]})
    env = trial_environment(spec, workdir=tmp_path / "work", base_env={})
    assert ALIAS not in env["PYTHONPATH"].split(os.pathsep)
    result = subprocess.run(
        [sys.executable, "-c", "import determined; print(determined.REAL)"],
        env={**os.environ, "PYTHONPATH": env["PYTHONPATH"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout == "True\n", result.stderr
