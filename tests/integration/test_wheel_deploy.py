"""What a platform team does: the built wheel installed into a clean virtualenv beside Airflow,
docs/deploy.md's commands run as written, Airflow's components started from that virtualenv, and
the example experiment followed to COMPLETED with the wheel's own `det`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import free_port
from tests.integration.det_env import EXAMPLE, REPO
from tests.unit.test_wheel import install_clean, wheel  # noqa: F401

pytestmark = pytest.mark.integration

PLAIN_PATH = "/usr/local/bin:/usr/bin:/bin"


def deploy_commands() -> list[str]:
    """docs/deploy.md's commands for an Airflow virtualenv, but the `pip install` that the wheel stands for."""
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text[text.index("## Into an Airflow 3.3 virtualenv") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "docs/deploy.md has no bash block for an Airflow virtualenv"
    lines = [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0].startswith("pip install 'det-airflow[airflow]'"), lines[0]
    return lines[1:]


@pytest.fixture(scope="module")
def deployed(wheel: Path) -> Iterator[tuple[Path, Path]]:  # noqa: F811
    """(the clean virtualenv's bin, its Airflow home), in a folder trials (other uids) may pass through."""
    folder = Path(tempfile.mkdtemp(prefix="det-wheel-"))
    folder.chmod(0o755)
    try:
        venv = install_clean(wheel, folder)
        yield venv / "bin", folder / "airflow"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_wheel_deployed_as_docs_deploy_md_says_runs_an_experiment_to_completed(
    deployed: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, home = deployed
    env = {
        "PATH": f"{bin_dir}:{PLAIN_PATH}",
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(home),
        "LANG": "C.UTF-8",
    }

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        # Away from the checkout, whose det_airflow/ would otherwise be imported.
        return subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)

    local = [str(bin_dir / "python"), "-m", "det_airflow.localairflow", "--home", str(home)]
    # The Airflow a team already runs: its own airflow.cfg on SQLite, the LocalExecutor, simple auth.
    port = free_port()
    made = run(*local, "init", "--dags-folder", str(home / "dags"), "--port", str(port))
    assert made.returncode == 0, made.stdout + made.stderr
    shutil.rmtree(home / "dags", ignore_errors=True)  # the team's DAGs folder does not exist yet

    script = "\n".join(["set -euo pipefail", *deploy_commands()])
    deploy = run("bash", "-c", script)
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert (home / "dags" / "det_experiments.py").is_file()
    assert "det-airflow" in deploy.stdout  # `airflow providers list | grep det-airflow`

    try:
        started = run(*local, "start", "--timeout", "300", timeout=400)
        assert started.returncode == 0, started.stdout + started.stderr
        env |= {
            "DET_MASTER": f"http://127.0.0.1:{port}",
            "DET_USER": "admin",
            "DET_PASS": json.loads((home / "simple_auth_manager_passwords.json").read_text())["admin"],
        }
        created = run(
            str(bin_dir / "det"),
            "experiment",
            "create",
            str(EXAMPLE / "const.yaml"),
            str(EXAMPLE),
            "-f",
            timeout=900,
        )
        assert created.returncode == 0, created.stdout[-4000:] + created.stderr[-4000:]
        assert re.search(r"Experiment \d+ ended in state COMPLETED", created.stdout), created.stdout[-4000:]
    finally:
        run(*local, "stop", timeout=120)
