"""Trial code is walled off from Airflow: on a real Airflow whose worker runs as root, a trial's
entrypoint goes after Airflow's secrets the way a hostile user would, and fails at each, while
the experiment still completes."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from det_airflow.trial_process import DEFAULT_TRIAL_USER
from tests.integration.det_env import EXAMPLE, DetEnv, kept_checkpoints

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="trials switch to an unprivileged user only when the worker runs as root (CI runs as root)",
    ),
]

# Each attempt prints `PROBE <what>: refused (...)` or `PROBE <what>: GOT ...`.
PROBE = textwrap.dedent(
    """
    import os, pwd, subprocess, sys
    from pathlib import Path

    import det_airflow as det

    home = Path(os.environ["PROBE_TARGET"])


    def attempt(what, action):
        try:
            found = action()
        except Exception as exc:
            print(f"PROBE {what}: refused ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
        else:
            print(f"PROBE {what}: GOT {found!r}"[:400], flush=True)


    def airflow_variables():
        names = [k for k in os.environ if "AIRFLOW" in k or "SQL_ALCHEMY" in k or "DATABASE" in k]
        if not names:
            raise LookupError("nothing of Airflow's in the environment")
        return names


    def worker_environment():
        # Up the process tree past the trial's own shells to the first process of another user.
        pid = os.getppid()
        while os.stat(f"/proc/{pid}").st_uid == os.getuid():
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return Path(f"/proc/{pid}/environ").read_bytes()


    def airflow_cli_connection():
        env = {**os.environ, "AIRFLOW_HOME": str(home)}
        result = subprocess.run(
            ["airflow", "connections", "get", "det_default", "-o", "json"],
            env=env, capture_output=True, text=True, timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError((result.stderr.strip().splitlines() or ["no output"])[-1])
        return result.stdout


    print(f"PROBE user: {pwd.getpwuid(os.getuid()).pw_name}", flush=True)
    print(f"PROBE home: {os.environ['HOME']}", flush=True)
    attempt("airflow.cfg", lambda: (home / "airflow.cfg").read_text())
    attempt("airflow home listing", lambda: os.listdir(home))
    attempt("passwords file", lambda: (home / "simple_auth_manager_passwords.json").read_text())
    attempt("airflow logs", lambda: os.listdir(home / "logs"))
    attempt("airflow environment", airflow_variables)
    attempt("worker environment", worker_environment)
    attempt("det_default connection", airflow_cli_connection)
    info = det.get_cluster_info()
    print(f"PROBE config data: {len(info.user_data['blob'])} characters", flush=True)
    """
)


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def _secrets(det: DetEnv) -> dict[str, str]:
    """What the trial must never see: Airflow's keys, the database URL, the service token."""
    cfg = configparser.RawConfigParser()
    cfg.read(det.af.home / "airflow.cfg")
    found = det.af.airflow("connections", "get", "det_default", "-o", "json")
    assert found.returncode == 0, found.stderr
    (connection,) = json.loads(found.stdout)
    return {
        "jwt_secret": cfg.get("api_auth", "jwt_secret"),
        "fernet_key": cfg.get("core", "fernet_key"),
        "api secret_key": cfg.get("api", "secret_key"),
        "database URL": cfg.get("database", "sql_alchemy_conn"),
        "service token": connection["password"],
        "admin password": det.af.admin_password,
    }


def test_a_trial_cannot_reach_airflows_secrets_and_still_completes(det: DetEnv, tmp_path: Path) -> None:
    context = tmp_path / "context"
    shutil.copytree(EXAMPLE, context, ignore=shutil.ignore_patterns("*.yaml", "__pycache__"))
    (context / "probe.py").write_text(PROBE)
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config.update(
        name="isolation probe",
        entrypoint="python3 probe.py && python3 train.py",
        # A config far larger than an environment variable may hold (the kernel's limit is 128 KiB).
        data={"blob": "x" * 200_000},
        environment={"environment_variables": [f"PROBE_TARGET={det.af.home}"]},
    )
    config["searcher"]["max_length"] = {"batches": 50}
    config_path = tmp_path / "probe.yaml"
    config_path.write_text(yaml.safe_dump(config))

    experiment_id = det.create(config_path, context)
    answer = det.wait_experiment(experiment_id, timeout=600)
    (trial,) = answer["trials"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert answer["experiment"]["state"] == "COMPLETED", logs

    assert f"PROBE user: {DEFAULT_TRIAL_USER}" in logs
    assert "PROBE home: " in logs and f"PROBE home: {Path.home()}" not in logs
    for what in (
        "airflow.cfg",
        "airflow home listing",
        "passwords file",
        "airflow logs",
        "airflow environment",
        "worker environment",
        "det_default connection",
    ):
        assert f"PROBE {what}: refused" in logs, f"{what} was not refused:\n{logs}"
    assert "GOT" not in logs
    leaked = [name for name, value in _secrets(det).items() if value and value in logs]
    assert leaked == []
    assert "PROBE config data: 200000 characters" in logs
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    kept_checkpoints(checkpoints, on_host=False)


def test_airflows_own_files_are_private_to_it(det: DetEnv) -> None:
    home = det.af.home
    assert oct(home.stat().st_mode & 0o777) == oct(0o711)
    for private in (home / "airflow.cfg", home / "simple_auth_manager_passwords.json", home / "logs"):
        assert private.stat().st_mode & 0o077 == 0, f"{private} is open to others"
