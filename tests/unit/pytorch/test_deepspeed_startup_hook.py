"""A DeepSpeedTrial under Determined's deepspeed launcher, in local test mode with a startup hook:
the trial runs in the overlay over det-airflow's environment and the launcher still finds the
``deepspeed`` program installed beside det-airflow (Determined's Hugging Face DeepSpeed examples
ship a ``startup-hook.sh``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_airflow.config import load_config
from det_airflow.trial_process import STARTUP_HOOK

from .test_deepspeed import _config, _context

pytest.importorskip("deepspeed")


def test_local_test_mode_with_a_startup_hook_runs_a_deepspeed_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from det_airflow.cli.local_test_mode import run_local_test

    # `det` started by its path: det-airflow's bin is not on the worker's PATH.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    folder = _context(tmp_path, _config(slots=1, max_length=4))
    (folder / STARTUP_HOOK).write_text('echo "startup hook ran"\n')

    code = run_local_test(load_config(folder / "const.yaml"), str(folder))

    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "startup-hook.sh runs in a throwaway virtual environment" in out.out
    assert "startup hook ran" in out.out
    assert "Local test mode succeeded" in out.out
