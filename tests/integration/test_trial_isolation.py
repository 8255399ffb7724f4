"""Trial code is walled off from Airflow: on a real Airflow whose worker runs as root, a trial's
entrypoint goes after Airflow's secrets the way a hostile user would, and fails at each, while
the experiment still completes."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from det_airflow.localairflow import PASSWORDS_FILE
from det_airflow.settings import DEFAULT_TRIAL_UID_RANGE
from tests.integration.det_env import EXAMPLE, DetEnv, kept_checkpoints, wait_until

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
    import os, subprocess, sys
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


    print(f"PROBE uid: {os.getuid()} {os.environ.get('USER')}", flush=True)
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

    first, last = DEFAULT_TRIAL_UID_RANGE
    (uid,) = {int(found) for found in re.findall(r"PROBE uid: (\d+)", logs)}
    assert first <= uid <= last, logs
    assert f"PROBE uid: {uid} det-{uid}" in logs
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


# Alice's trial: saves a checkpoint, then holds until released, refusing to stop otherwise.
HOLD = textwrap.dedent(
    """
    import os, time
    from pathlib import Path

    import det_airflow as det

    with det.core.init() as core:
        with core.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "state.json").write_text('{"step": 1}')
        print(f"HOLD checkpoint {uuid}", flush=True)
        while not Path(os.environ["RELEASE_FILE"]).exists():
            time.sleep(0.5)
    print("HOLD released", flush=True)
    """
)

# Bob's trial goes after Alice's running trial the way a hostile user would.
PRY = textwrap.dedent(
    """
    import os, signal
    from pathlib import Path

    workdir, checkpoint = Path(os.environ["ALICE_WORKDIR"]), Path(os.environ["ALICE_CHECKPOINT"])


    def attempt(what, action):
        try:
            found = action()
        except Exception as exc:
            print(f"PRY {what}: refused ({type(exc).__name__})", flush=True)
        else:
            print(f"PRY {what}: GOT {found!r}"[:300], flush=True)


    def alice_pid():
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and b"alice_hold.py" in (proc / "cmdline").read_bytes():
                    return int(proc.name)
            except OSError:
                pass
        raise LookupError("no process of alice_hold.py")


    pid = alice_pid()
    print(f"PRY uid: {os.getuid()}", flush=True)
    print(f"PRY found alice's trial: {pid}", flush=True)
    attempt("environ", lambda: Path(f"/proc/{pid}/environ").read_bytes())
    attempt("work folder", lambda: os.listdir(workdir))
    attempt("config file", lambda: (workdir / ".det" / "experiment_config.json").read_text())
    attempt("checkpoint read", lambda: (checkpoint / "state.json").read_text())
    attempt("checkpoint write", lambda: (checkpoint / "state.json").write_text("{}"))
    attempt("checkpoint listing", lambda: os.listdir(checkpoint.parent))
    attempt("signal", lambda: os.kill(pid, signal.SIGKILL))
    """
)


def _create_as(det: DetEnv, user: str, config: Path, context: Path) -> int:
    password = json.loads((det.af.home / PASSWORDS_FILE).read_text())[user]
    return det.as_user(user, password, config.parent).create(config, context)


def _config(tmp_path: Path, user: str, script: str, variables: list[str]) -> tuple[Path, Path]:
    context = tmp_path / f"context-{user}"
    context.mkdir()
    (context / f"{user}_{'hold' if user == 'alice' else 'pry'}.py").write_text(script)
    config = {
        "name": f"isolation {user}",
        "entrypoint": f"python3 {user}_{'hold' if user == 'alice' else 'pry'}.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "environment": {"environment_variables": variables},
        "max_restarts": 0,
    }
    path = tmp_path / f"cli-{user}" / f"{user}.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    return path, context


@pytest.fixture
def release() -> Iterator[Path]:
    """A folder every uid may look into (pytest's tmp_path is not): alice's trial polls it."""
    with tempfile.TemporaryDirectory(prefix="det-isolation-release-") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def test_one_users_trial_cannot_read_signal_or_change_anothers(
    det: DetEnv, tmp_path: Path, release: Path
) -> None:
    alice_config, alice_context = _config(tmp_path, "alice", HOLD, [f"RELEASE_FILE={release / 'go'}"])
    alice = _create_as(det, "alice", alice_config, alice_context)
    (checkpoint,) = wait_until(
        lambda: det.get(f"/experiments/{alice}/checkpoints")["checkpoints"], "alice's checkpoint", timeout=300
    )
    (alice_trial,) = det.get(f"/experiments/{alice}/trials")["trials"]
    assert alice_trial["state"] == "RUNNING"
    workdir = det.af.home / "det-trials" / f"exp_{alice}" / f"trial_{alice_trial['id']}"
    checkpoint_dir = Path(checkpoint["storage"]["path"])
    assert checkpoint_dir.name == checkpoint["uuid"] and checkpoint_dir.is_dir(), checkpoint
    alice_uid = workdir.stat().st_uid
    assert oct(workdir.stat().st_mode & 0o777) == oct(0o700)
    assert checkpoint_dir.stat().st_uid == alice_uid and checkpoint_dir.stat().st_mode & 0o077 == 0

    bob_config, bob_context = _config(
        tmp_path, "bob", PRY, [f"ALICE_WORKDIR={workdir}", f"ALICE_CHECKPOINT={checkpoint_dir}"]
    )
    bob = _create_as(det, "bob", bob_config, bob_context)
    bob_answer = det.wait_experiment(bob, timeout=600)
    (bob_trial,) = bob_answer["trials"]
    logs = det.det("trial", "logs", str(bob_trial["id"])).stdout
    assert "PRY found alice's trial: " in logs, logs
    for what in (
        "environ",
        "work folder",
        "config file",
        "checkpoint read",
        "checkpoint write",
        "checkpoint listing",
        "signal",
    ):
        assert f"PRY {what}: refused (PermissionError)" in logs, f"{what} was not refused:\n{logs}"
    assert "GOT" not in logs
    assert (checkpoint_dir / "state.json").read_text() == '{"step": 1}'

    (release / "go").write_text("go")
    (release / "go").chmod(0o644)
    alice_answer = det.wait_experiment(alice, timeout=600)
    assert alice_answer["experiment"]["state"] == "COMPLETED"
    (alice_done,) = alice_answer["trials"]
    assert alice_done["restarts"] == 0
    alice_logs = det.det("trial", "logs", str(alice_done["id"])).stdout
    assert "HOLD released" in alice_logs
    (bob_uid,) = {int(found) for found in re.findall(r"PRY uid: (\d+)", logs)}
    assert bob_uid != alice_uid and 0 not in (bob_uid, alice_uid)
