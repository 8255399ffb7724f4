"""The README's tour, pasted as a newcomer would: the export lines `make quickstart` prints, then the
README's own commands, in a new shell with nothing else set up, against an Airflow as the
quickstart starts it (SQLite, the LocalExecutor, nothing run before: the experiment is 1)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow.localairflow import LocalAirflow, sqlite_url
from tests.integration.conftest import _airflow_base, _run_airflow, default_config_extra
from tests.integration.det_env import REPO, DetEnv

pytestmark = pytest.mark.integration

README = REPO / "README.md"
# A new shell's PATH: no .venv/bin until the tour's first line puts it there.
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def readme_block(heading: str) -> list[str]:
    """The lines of the first ```bash block after the README's ``heading``."""
    text = README.read_text()
    start = text.index(f"\n{heading}\n")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block is not None, f"no bash block under {heading!r} in README.md"
    return block.group(1).splitlines()


def exported(lines: list[str]) -> list[str]:
    """The variable names the ``export`` lines set, in order."""
    return [name for line in lines for name in re.findall(r"(?:^export | )([A-Z_]+)=", line.split("#")[0])]


@pytest.fixture(scope="module")
def fresh_airflow() -> Iterator[LocalAirflow]:
    """A new SQLite Airflow, as `make quickstart` starts one, with det installed."""
    base = _airflow_base("readme-tour")
    yield from _run_airflow(base, sqlite_url(base / "home"), "sqlite, README tour", default_config_extra())


def test_the_tour_runs_as_pasted_after_the_lines_the_quickstart_prints(
    fresh_airflow: LocalAirflow, tmp_path: Path
) -> None:
    DetEnv.install(fresh_airflow, tmp_path / "installer")
    port = fresh_airflow.url.rsplit(":", 1)[1]
    printed = subprocess.run(
        ["make", "-s", "--no-print-directory", "tour-exports", f"AIRFLOW_HOME_DIR={fresh_airflow.home}"]
        + [f"AIRFLOW_PORT={port}"],
        cwd=REPO,
        env={"PATH": PLAIN_PATH},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    tour = readme_block("### Submit an experiment")
    # The README's first two lines stand for what the quickstart printed: the same variables.
    assert (
        exported(tour[:2])
        == exported(printed)
        == ["PATH", "AIRFLOW_HOME", "DET_MASTER", "DET_USER", "DET_PASS"]
    )
    commands = [line for line in tour[2:] if line.strip() and not line.startswith("#")]
    assert commands[0].startswith("det experiment create ")
    # Then the README's preview and job-queue lines that need no ID of the reader's.
    search = [line for line in readme_block("### Adaptive search") if line.startswith("det preview-search")]
    queue = [line for line in readme_block("### The job queue") if line.startswith("det job list")]
    assert search and queue
    script = "\n".join(
        ["set -euo pipefail", *printed, *commands, *search, *queue, "airflow dags list-runs det_exp_1"]
    )

    shell = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env={"PATH": PLAIN_PATH, "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=900,
    )

    out = shell.stdout
    assert shell.returncode == 0, f"{out}\n{shell.stderr}"
    # What the README's comment lines say the create prints.
    assert re.search(
        r"Preparing files \(.*mnist_pytorch\) to send to master\.\.\. [\d.]+KB and \d+ files", out
    )
    assert "Created experiment 1\n" in out
    assert "Experiment 1 ended in state COMPLETED" in out  # det e wait 1
    assert re.search(r"^\s*1\s.*mnist_pytorch_const", out, re.M)  # det e list
    assert "This search will create a total of 8 trial(s)" in out  # det preview-search
    assert re.search(r"#\s*\|\s*ID\s*\|\s*Type\s*\|\s*Job Name", out)  # det job list's header
    assert re.search(r"det_exp_1\s.*success", out)  # airflow's CLI, with the AIRFLOW_HOME it was given
