"""`det experiment create --local --test-mode`: one trial on this machine, checked through the local store."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from det_airflow.cli.main import main

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("det_airflow.trial_process") is None,
    reason="det_airflow.trial_process (TrialSpec, run_trial_process) is not written yet",
)

TRAIN = """\
import sys
import det_airflow as det

info = det.get_cluster_info()
print("hparams", info.trial.hparams if info else None)
print("to stderr", file=sys.stderr)
with det.core.init() as core_context:
    if "train" in sys.argv:
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
    if "validate" in sys.argv:
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"loss": 0.5})
    if "checkpoint" in sys.argv:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "model.txt").write_text("weights")
sys.exit(3 if "fail" in sys.argv else 0)
"""


def _project(tmp_path: Path, *args: str, metric: str = "loss") -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    config = tmp_path / "const.yaml"
    config.write_text(
        f"name: local\n"
        f"entrypoint: {sys.executable} train.py {' '.join(args)}\n"
        f"hyperparameters: {{lr: {{type: double, minval: 0.1, maxval: 0.2}}}}\n"
        f"searcher: {{name: random, metric: {metric}, max_trials: 3, max_length: {{batches: 10}}}}\n"
    )
    return tmp_path


def test_local_test_mode_passes(cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path, "train", "validate", "checkpoint")
    code = main(["e", "create", "--local", "--test-mode", str(project / "const.yaml"), str(project / "code")])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "Preparing files" in out and "and 1 files" in out
    assert "hparams {'lr': 0." in out + err  # the trial's output reached the terminal
    assert "to stderr" in out + err
    assert "Local test mode succeeded" in out
    assert "FAILED" not in out


@pytest.mark.parametrize(
    ("args", "metric", "failure"),
    [
        (["train", "validate", "checkpoint", "fail"], "loss", "Error: the entrypoint exited with code 3"),
    ],
)
def test_local_test_mode_failures(
    cli_env: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    args: list[str],
    metric: str,
    failure: str,
) -> None:
    project = _project(tmp_path, *args, metric=metric)
    code = main(["e", "create", "--local", "-t", str(project / "const.yaml"), str(project / "code")])
    out, err = capfd.readouterr()
    assert code == 1
    assert failure in err
    assert "FAILED" in out
    assert "Traceback" not in err


def _rows(out: str) -> dict[str, tuple[str, str]]:
    """The check table as {check: (found, result)}."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) == 3 and cells[0] != "Check":
            rows[cells[0]] = (cells[1], cells[2])
    return rows


@pytest.mark.parametrize(
    "args",
    [[], ["train"], ["train", "checkpoint"], ["validate", "checkpoint"], ["train", "validate"]],
)
def test_a_program_that_reports_less_passes_and_the_table_says_what_it_saw(
    cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], args: list[str]
) -> None:
    project = _project(tmp_path, *args)
    code = main(["e", "create", "--local", "-t", str(project / "const.yaml"), str(project / "code")])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    rows = _rows(out)
    assert rows["Training metrics"] == ("1 report" if "train" in args else "0 reports", "-")
    assert rows["Validation metrics"] == ("1 report" if "validate" in args else "0 reports", "-")
    assert rows["Checkpoints"] == ("1" if "checkpoint" in args else "0", "-")
    assert "Local test mode succeeded" in out


def test_the_run_says_which_determined_package_runs(
    cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path)
    main(["e", "create", "--local", "-t", str(project / "const.yaml"), str(project / "code")])
    out, _ = capfd.readouterr()
    assert "import determined: det-airflow's implementation of Determined's training API runs" in out
