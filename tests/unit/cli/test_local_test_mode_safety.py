"""`det experiment create --local --test-mode` leaves the user's machine alone: a startup hook's
`pip install` never reaches det-airflow's environment, a stopped `det` leaves no trial process
behind, and a validation without the searcher's metric fails only an adaptive search."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from det_airflow.cli.main import main

HOOK = """\
python -m pip install --no-index --no-build-isolation --no-deps --quiet ./tinypkg ./six_stand_in
"""
TRAIN_WITH_PACKAGE = """\
import six
import tinypkg
print("tinypkg", tinypkg.VALUE, "six", six.__version__)
"""
# Lists what this interpreter's environment holds: every distribution and every entry of its site folders.
PACKAGE_SET = """\
import importlib.metadata, json, os, site
print(json.dumps({
    "distributions": sorted((d.metadata["Name"], d.version) for d in importlib.metadata.distributions()),
    "files": sorted(name for folder in site.getsitepackages() for name in os.listdir(folder)),
}))
"""


def _project(tmp_path: Path, train: str, searcher: str, *, hook: str | None = None) -> tuple[Path, Path]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(train)
    if hook is not None:
        (code / "startup-hook.sh").write_text(hook)
    config = tmp_path / "const.yaml"
    config.write_text(f"name: local\nentrypoint: python train.py\nsearcher: {searcher}\n")
    return config, code


def _python_project(folder: Path, name: str, version: str, module: str) -> None:
    """A project pip builds with setuptools, offline."""
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "{version}"
            """
        )
    )
    (folder / f"{name}.py").write_text(module)


def _package_set() -> dict[str, list]:
    listed = subprocess.run(
        [sys.executable, "-c", PACKAGE_SET], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(listed.stdout)


def test_a_hook_that_pip_installs_leaves_det_airflows_environment_as_it_was(
    cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config, code = _project(tmp_path, TRAIN_WITH_PACKAGE, "{name: single, metric: loss}", hook=HOOK)
    _python_project(code / "tinypkg", "tinypkg", "1.0", "VALUE = 42\n")
    # A package det-airflow's environment already has, in another version: as a hook that pins
    # setuptools would ask.
    _python_project(code / "six_stand_in", "six", "0.0.1", "__version__ = '0.0.1'\n")
    before = _package_set()

    status = main(["e", "create", "--local", "--test-mode", str(config), str(code)])

    out, err = capfd.readouterr()
    assert status == 0, out + err
    assert "startup-hook.sh runs in a throwaway virtual environment" in out
    assert "tinypkg 42 six 0.0.1" in out
    assert _package_set() == before
    assert subprocess.run([sys.executable, "-c", "import tinypkg"], capture_output=True).returncode != 0


def test_the_hooks_environment_is_gone_after_the_test(
    cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config, code = _project(tmp_path, TRAIN_WITH_PACKAGE, "{name: single, metric: loss}", hook=HOOK)
    _python_project(code / "tinypkg", "tinypkg", "1.0", "VALUE = 42\n")
    _python_project(code / "six_stand_in", "six", "0.0.1", "__version__ = '0.0.1'\n")

    assert main(["e", "create", "--local", "--test-mode", str(config), str(code)]) == 0

    capfd.readouterr()
    assert not list(tmp_path.glob("det-local-test-*"))  # tempfile's folder is tmp_path (cli_env)


TRAIN_WITH_GRANDCHILD = """\
import json, os, subprocess, sys, time
sleeper = subprocess.Popen(["sleep", "600"])
with open(sys.argv[1], "w") as f:
    json.dump({"pids": [os.getpid(), sleeper.pid], "pgid": os.getpgrp()}, f)
print("ready", flush=True)
time.sleep(600)
"""


def _living(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left for a reaper that is not there does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_det_stops_the_trials_whole_process_group(
    cli_env: Path, tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    pids_file = tmp_path / "pids.json"
    config, code = _project(tmp_path, TRAIN_WITH_GRANDCHILD, "{name: single, metric: loss}")
    config.write_text(config.read_text().replace("train.py", f"train.py {pids_file}"))
    det = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "det_airflow.cli.main",
            "e",
            "create",
            "--local",
            "-t",
            str(config),
            str(code),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not pids_file.exists() or not pids_file.read_text():
            assert det.poll() is None, det.communicate()
            assert time.monotonic() < deadline, "the trial never started"
            time.sleep(0.1)
        trial = json.loads(pids_file.read_text())
        det.send_signal(sig)
        out, err = det.communicate(timeout=60)
    finally:
        if det.poll() is None:
            det.kill()
    assert det.returncode == status, out + err
    # The trial's own output may come first (a KeyboardInterrupt's traceback); det's word is the last.
    assert err.splitlines()[-1] == (
        f"Error: det received {sig.name}: the trial and every process it started were stopped"
    )
    assert [pid for pid in trial["pids"] if _living(pid)] == []
    assert _group_members(trial["pgid"]) == []


VALIDATE_WITHOUT_METRIC = """\
import determined as det
with det.core.init() as core_context:
    core_context.train.report_validation_metrics(steps_completed=1, metrics={"accuracy": 0.9})
"""


@pytest.mark.parametrize(
    "searcher",
    [
        "{name: single, metric: loss}",
        "{name: grid, metric: loss, max_length: {batches: 1}}",
        "{name: random, metric: loss, max_trials: 2, max_length: {batches: 1}}",
    ],
)
def test_single_grid_and_random_accept_a_validation_without_the_metric(
    cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], searcher: str
) -> None:
    config, code = _project(tmp_path, VALIDATE_WITHOUT_METRIC, searcher)
    status = main(["e", "create", "--local", "-t", str(config), str(code)])
    out, err = capfd.readouterr()
    assert status == 0, out + err
    assert "Local test mode succeeded" in out


def test_adaptive_search_fails_a_validation_without_the_metric_naming_it(
    cli_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    searcher = "{name: adaptive_asha, metric: loss, max_trials: 2, max_length: {batches: 4}}"
    config, code = _project(tmp_path, VALIDATE_WITHOUT_METRIC, searcher)
    status = main(["e", "create", "--local", "-t", str(config), str(code)])
    out, err = capfd.readouterr()
    assert status == 1
    assert (
        "Error: the searcher's metric 'loss' (searcher.metric in the config) is missing from 1 of "
        "1 validation report; the adaptive_asha searcher needs it in every one"
    ) in err
    assert "Traceback" not in err
