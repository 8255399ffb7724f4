"""The installed `det` console script, run as a user runs it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from .conftest import TOKEN, run_det_script


def _env(master: Any, config_dir: Path) -> dict[str, str]:
    return {
        "DET_MASTER": master.url,
        "DET_AIRFLOW_CONFIG_DIR": str(config_dir),
        "DET_USER": "",
        "DET_PASS": "",
    }


def test_help_is_fast_and_light() -> None:
    start = time.monotonic()
    result = run_det_script("--help")
    elapsed = time.monotonic() - start
    assert result.code == 0
    assert "experiment (e)" in result.out
    print(f"det --help took {elapsed:.2f}s")  # shown with -s; no timing assertion (see DESIGN.md)


def test_cli_imports_no_heavy_library() -> None:
    import subprocess

    code = (
        "import sys; import det_airflow.cli.main; "
        "print(sorted(m for m in ('torch', 'airflow', 'optuna', 'fastapi', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_list_against_a_master(master: Any, cli_env: Path) -> None:
    result = run_det_script("e", "ls", env=_env(master, cli_env))
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].split("|")[0].strip() == "ID"
    assert master.seen_auth == [f"Bearer {TOKEN}"]


def test_master_flag_wins_over_env(master: Any, cli_env: Path) -> None:
    env = _env(master, cli_env) | {"DET_MASTER": "127.0.0.1:9"}
    result = run_det_script("-m", master.url, "user", "whoami", env=env)
    assert (result.code, result.out) == (0, "You are logged in as user 'admin'\n")


def test_errors_are_one_line_without_traceback(master: Any, cli_env: Path, tmp_path: Path) -> None:
    env = _env(master, cli_env)
    result = run_det_script("e", "describe", "999", env=env)
    assert (result.code, result.err) == (1, "Error: experiment 999 not found\n")

    bad = tmp_path / "bad.yaml"
    bad.write_text("searcher: [oops\n")
    result = run_det_script("e", "create", str(bad), env=env)
    assert result.code == 1
    assert result.err.startswith(f"Error: {bad}: invalid YAML")
    assert "Traceback" not in result.err


def test_usage_error_exits_2(cli_env: Path) -> None:
    result = run_det_script("experiment", "nonsense", env={"DET_AIRFLOW_CONFIG_DIR": str(cli_env)})
    assert result.code == 2
    assert "usage: det experiment" in result.err
