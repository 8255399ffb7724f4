"""The tensorflow launcher, run as a trial runs it: TF_CONFIG for several containers, pass-through for one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import det_airflow

REPO = Path(det_airflow.__file__).resolve().parent.parent
PRINT_TF_CONFIG = [
    sys.executable,
    "-c",
    "import os; print('TF_CONFIG=' + os.environ.get('TF_CONFIG', 'unset'))",
]


def _launch(args: list[str], **det_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "TF_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "det_airflow" / "compat"), str(REPO)])
    env.update(det_env)
    return subprocess.run(
        [sys.executable, "-m", "determined.launch.tensorflow", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_two_containers_get_tf_config_and_rank_prefixed_lines() -> None:
    done = _launch(
        ["--", *PRINT_TF_CONFIG],
        DET_TRIAL_ID="1",
        DET_CONTAINER_ADDRS=json.dumps(["10.0.0.5", "10.0.0.6"]),
        DET_CONTAINER_RANK="1",
        DET_RENDEZVOUS_PORT="23456",
    )
    assert done.returncode == 0, done.stderr
    prefix, _, value = done.stdout.strip().partition("TF_CONFIG=")
    assert prefix == "[rank=1] "
    assert json.loads(value) == {
        "cluster": {"worker": ["10.0.0.5:23456", "10.0.0.6:23456"]},
        "task": {"type": "worker", "index": 1},
    }


def test_the_port_option_wins() -> None:
    done = _launch(
        ["--port", "24000", *PRINT_TF_CONFIG],
        DET_TRIAL_ID="1",
        DET_CONTAINER_ADDRS=json.dumps(["a", "b"]),
        DET_CONTAINER_RANK="0",
    )
    assert json.loads(done.stdout.partition("TF_CONFIG=")[2])["cluster"]["worker"] == ["a:24000", "b:24000"]


def test_one_container_passes_through() -> None:
    done = _launch([*PRINT_TF_CONFIG, "extra"], DET_TRIAL_ID="1", DET_CONTAINER_ADDRS='["10.0.0.5"]')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "TF_CONFIG=unset\n"


def test_the_script_exit_status_is_the_launcher_s() -> None:
    assert _launch([sys.executable, "-c", "raise SystemExit(3)"]).returncode == 3


def test_bad_input_is_one_clear_error() -> None:
    empty = _launch([])
    assert empty.returncode == 2
    assert "error: give --trial module:Class or a command to run" in empty.stderr
    bad_port = _launch(["--port", "http", "--", "true"])
    assert bad_port.returncode == 2
    assert "expected a TCP port (1-65535), got 'http'" in bad_port.stderr
    missing = _launch(["/no/such/program"])
    assert missing.returncode == 127
    assert missing.stderr.strip() == (
        "python3 -m det_airflow.launchers.tensorflow: cannot run '/no/such/program': No such file or directory"
    )
    assert "Traceback" not in missing.stderr + bad_port.stderr + empty.stderr
