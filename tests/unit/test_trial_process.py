"""trial_process: the spec, the entrypoint's argv, the DET_* environment, and running the process."""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import signal
import stat
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow import trial_env
from det_airflow.cluster_info import cluster_info_from_env
from det_airflow.trial_process import (
    DEFAULT_TRIAL_USER,
    TrialIsolationError,
    TrialSpec,
    TrialUser,
    check_trial_access,
    ensure_writable_dir,
    entrypoint_argv,
    hand_over,
    prepare_workdir,
    run_trial_process,
    trial_environment,
    trial_user,
    write_trial_files,
)

SPEC = {
    "trial_id": 12,
    "experiment_id": 4,
    "request_id": "req-1",
    "trial_seed": 777,
    "hparams": {"lr": 0.01, "layers": {"n": 2}},
    "config": {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss"},
        "environment": {"environment_variables": {"cpu": ["FOO=bar", "EQ=a=b"], "cuda": ["GPU_ONLY=1"]}},
        "data": {"x": 1},
    },
    "latest_checkpoint": "ckpt-1",
    "steps_completed": 300,
    "run_id": 2,
    "uid": 61185,
    "gid": 61185,
}


class Output:
    """Collects on_output calls."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, line: str, stream: str) -> None:
        self.lines.append((line, stream))

    def of(self, stream: str) -> list[str]:
        return [line for line, s in self.lines if s == stream]


# --- TrialSpec --------------------------------------------------------------------------------------


def test_spec_round_trips_through_dicts() -> None:
    spec = TrialSpec.from_dict(SPEC)
    assert spec.trial_id == 12 and spec.hparams["layers"] == {"n": 2}
    assert spec.to_dict() == {**SPEC, "gang": None}


def test_spec_defaults_for_a_fresh_trial() -> None:
    spec = TrialSpec.from_dict({"trial_id": 1, "experiment_id": 2, "request_id": "r", "trial_seed": 3})
    assert (spec.latest_checkpoint, spec.steps_completed, spec.run_id, spec.hparams) == (None, 0, 0, {})


# --- entrypoint_argv ------------------------------------------------------------------------------


def test_a_string_entrypoint_runs_with_sh() -> None:
    assert entrypoint_argv("python3 train.py --epochs 2") == ["sh", "-c", "python3 train.py --epochs 2"]


def test_a_list_entrypoint_is_execd_as_is() -> None:
    assert entrypoint_argv(["python3", "train.py"]) == ["python3", "train.py"]
    assert entrypoint_argv(("python3", "-m", "x")) == ["python3", "-m", "x"]


@pytest.mark.parametrize("ep", ["model_def:MNistTrial", "pkg.model_def:Trial"])
def test_a_legacy_trial_class_runs_under_the_torch_distributed_launcher(ep: str) -> None:
    assert entrypoint_argv(ep) == [
        sys.executable,
        "-m",
        "det_airflow.launchers.torch_distributed",
        "--trial",
        ep,
    ]


def test_a_command_with_a_colon_is_still_a_command() -> None:
    assert entrypoint_argv("python3 x.py a:b")[:2] == ["sh", "-c"]


# --- trial_environment ----------------------------------------------------------------------------


def test_the_environment_of_a_trial_on_a_master() -> None:
    env = trial_environment(
        TrialSpec.from_dict(SPEC),
        master_url="http://master:8080",
        token="tok",
        slot_ids=[0, 1],
        base_env={"PATH": "/usr/bin", "PYTHONPATH": "/opt/lib"},
        workdir="/run/trial",
    )
    assert env["PATH"] == os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin"])
    assert env[trial_env.MASTER] == "http://master:8080" and env[trial_env.SESSION_TOKEN] == "tok"
    assert env[trial_env.TRIAL_ID] == "12" and env[trial_env.EXPERIMENT_ID] == "4"
    assert env[trial_env.TRIAL_SEED] == "777"
    assert json.loads(env[trial_env.HPARAMS]) == SPEC["hparams"]
    assert env[trial_env.EXPERIMENT_CONFIG_FILE] == "/run/trial/.det/experiment_config.json"
    # Determined's own variable too, for code that reads the config from the environment.
    assert json.loads(env[trial_env.EXPERIMENT_CONFIG]) == SPEC["config"]
    assert env[trial_env.LATEST_CHECKPOINT] == "ckpt-1" and env[trial_env.STEPS_COMPLETED] == "300"
    assert json.loads(env[trial_env.SLOT_IDS]) == [0, 1]
    assert env[trial_env.CHIEF_IP] == "127.0.0.1" and env[trial_env.CONTAINER_RANK] == "0"
    assert env[trial_env.TRIAL_RUN_ID] == "2"
    assert env["FOO"] == "bar" and env["EQ"] == "a=b" and "GPU_ONLY" not in env
    assert env["PYTHONUNBUFFERED"] == "1"
    python_path = env["PYTHONPATH"].split(os.pathsep)
    assert python_path[0] == "/run/trial" and "/opt/lib" not in python_path
    assert env["HOME"] == "/run/trial/.det/home" and env["TMPDIR"] == "/run/trial/.det/tmp"
    assert trial_env.LOCAL_STORE not in env and trial_env.TEST_MODE not in env


def test_a_node_of_a_run_over_several_hosts_knows_where_it_stands() -> None:
    gang = {"addrs": ["gpu-a", "gpu-b"], "rank": 1, "slots": 2, "port": 29555}
    spec = TrialSpec.from_dict({**SPEC, "gang": gang})
    env = trial_environment(spec, master_url="http://master:8080", token="tok", slot_ids=[0, 1])
    assert json.loads(env[trial_env.CONTAINER_ADDRS]) == ["gpu-a", "gpu-b"]
    assert (env[trial_env.CHIEF_IP], env[trial_env.CONTAINER_RANK]) == ("gpu-a", "1")
    assert env[trial_env.RENDEZVOUS_PORT] == "29555"
    info = cluster_info_from_env({**env, trial_env.EXPERIMENT_CONFIG: "{}"})
    assert info is not None and (info.container_rank, info.container_addrs) == (1, ["gpu-a", "gpu-b"])


WORKER_ENV = {
    "PATH": "/usr/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "TERM": "xterm",
    "HOME": "/root",
    "TMPDIR": "/var/tmp/airflow",
    "AIRFLOW_HOME": "/srv/airflow",
    "AIRFLOW_CONFIG": "/srv/airflow/airflow.cfg",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt",
    "AIRFLOW__CORE__FERNET_KEY": "fernet",
    "AIRFLOW_CONN_DET_DEFAULT": "http://:service-token@127.0.0.1:8080",
    "AIRFLOW_VAR_SECRET": "v",
    "DATABASE_URL": "postgresql://u:p@db/x",
    "HTTPS_PROXY": "http://proxy:3128",
    "http_proxy": "http://proxy:3128",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "PYTHONPATH": "/srv/airflow/plugins",
    "PYTHONSTARTUP": "/srv/airflow/startup.py",
    "LD_PRELOAD": "/srv/airflow/hook.so",
    "_DET_LOCALAIRFLOW_HOME": "/srv/airflow",
}


def test_nothing_of_the_workers_environment_survives_but_the_allow_list(tmp_path: Path) -> None:
    env = trial_environment(
        TrialSpec.from_dict(SPEC), master_url="http://m", token="t", base_env=WORKER_ENV, workdir=tmp_path
    )
    kept = {k: v for k, v in WORKER_ENV.items() if env.get(k) == v}
    assert kept == {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TERM": "xterm"}
    assert not [k for k in env if "AIRFLOW" in k or "PROXY" in k.upper()]
    secrets = ("pw@db", "jwt", "fernet", "service-token", "aws", "/srv/airflow")
    assert not [(k, v) for k, v in env.items() if any(s in v for s in secrets)]
    assert env["PATH"].split(os.pathsep)[1:] == ["/usr/bin"]
    assert env["HOME"] == str(tmp_path / ".det" / "home") and env["TMPDIR"] == str(tmp_path / ".det" / "tmp")


def test_the_configs_variables_are_the_way_to_add_to_the_environment() -> None:
    spec = dict(
        SPEC,
        config={"environment": {"environment_variables": ["HTTPS_PROXY=http://mine:1", "PYTHONPATH=/opt/x"]}},
    )
    env = trial_environment(TrialSpec.from_dict(spec), base_env=WORKER_ENV, workdir="/w")
    assert env["HTTPS_PROXY"] == "http://mine:1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == "/w" and env["PYTHONPATH"].endswith("/opt/x")


def test_the_config_may_not_pose_as_another_trial_or_master() -> None:
    config = {
        "environment": {"environment_variables": ["DET_MASTER=http://evil", "DET_EXPERIMENT_CONFIG={}"]}
    }
    env = trial_environment(TrialSpec.from_dict(dict(SPEC, config=config)), base_env={})
    assert trial_env.MASTER not in env
    assert json.loads(env[trial_env.EXPERIMENT_CONFIG]) == config  # the trial's own, not the one posed


def test_the_config_reaches_the_trial_through_a_file(tmp_path: Path) -> None:
    spec = TrialSpec.from_dict(SPEC)
    path = write_trial_files(spec, tmp_path)
    env = trial_environment(spec, base_env={}, workdir=tmp_path)
    assert (
        env[trial_env.EXPERIMENT_CONFIG_FILE]
        == str(path)
        == str(tmp_path / ".det" / "experiment_config.json")
    )
    assert json.loads(path.read_text()) == SPEC["config"]
    assert Path(env["HOME"]).is_dir() and Path(env["TMPDIR"]).is_dir()
    assert stat.S_IMODE((tmp_path / ".det").stat().st_mode) == 0o700


def test_a_200_kb_config_starts_a_trial_that_reads_it(tmp_path: Path) -> None:
    config = dict(SPEC["config"], data={"blob": "x" * 200_000})
    spec = TrialSpec.from_dict(dict(SPEC, config=config))
    write_trial_files(spec, tmp_path)
    env = trial_environment(spec, base_env={"PATH": os.environ["PATH"]}, workdir=tmp_path)
    script = "import det_airflow as det; print(len(det.get_cluster_info().user_data['blob']))"
    out = Output()
    code = run_trial_process(tmp_path, [sys.executable, "-c", script], env, on_output=out)
    assert (code, out.of("stdout")) == (0, ["200000"]), out.lines


def test_the_training_side_reads_back_what_the_environment_says(tmp_path: Path) -> None:
    spec = TrialSpec.from_dict(SPEC)
    write_trial_files(spec, tmp_path)
    env = trial_environment(spec, master_url="http://m", token="t", base_env={}, workdir=tmp_path)
    info = cluster_info_from_env(env)
    assert info is not None
    assert info.trial.config == SPEC["config"]
    assert info.trial.trial_id == 12 and info.trial.hparams == SPEC["hparams"]
    assert info.latest_checkpoint == "ckpt-1" and info.user_data == {"x": 1}
    assert info.container_addrs == ["127.0.0.1"] and info.allocation_id == "4.12.2"


def test_a_local_trial_has_no_master_even_if_the_caller_had_one(tmp_path: Path) -> None:
    base = {
        trial_env.MASTER: "http://people-master",
        trial_env.SESSION_TOKEN: "cli",
        trial_env.TEST_MODE: "1",
    }
    env = trial_environment(TrialSpec.from_dict(SPEC), local_store=tmp_path / "store", base_env=base)
    assert trial_env.MASTER not in env and trial_env.SESSION_TOKEN not in env
    assert env[trial_env.LOCAL_STORE] == str(tmp_path / "store")
    assert trial_env.TEST_MODE not in env
    assert (
        trial_environment(TrialSpec.from_dict(SPEC), test_mode=True, base_env={})[trial_env.TEST_MODE] == "1"
    )


def test_without_a_path_none_is_made_up() -> None:
    assert "PATH" not in trial_environment(TrialSpec.from_dict(SPEC), base_env={})


def test_the_trial_variables_win_over_the_configs() -> None:
    spec = dict(SPEC, config={"environment": {"environment_variables": ["DET_TRIAL_ID=999", "A=1"]}})
    env = trial_environment(TrialSpec.from_dict(spec), base_env={})
    assert env[trial_env.TRIAL_ID] == "12" and env["A"] == "1"


# --- run_trial_process ----------------------------------------------------------------------------


def _run(tmp_path: Path, argv: list[str], stop_on: str | None = None, **kwargs) -> tuple[int, Output]:  # type: ignore[no-untyped-def]
    """Run ``argv``; with ``stop_on``, set ``kwargs["stop"]`` when that line is printed."""
    out = Output()
    on_output = out
    if stop_on is not None:
        stop: threading.Event = kwargs["stop"]

        def on_output(line: str, stream: str) -> None:  # type: ignore[misc]
            out(line, stream)
            if line == stop_on:
                stop.set()

    code = run_trial_process(
        tmp_path, argv, {**os.environ, "PYTHONUNBUFFERED": "1"}, on_output=on_output, **kwargs
    )
    return code, out


def test_output_lines_and_exit_code(tmp_path: Path) -> None:
    code, out = _run(tmp_path, entrypoint_argv("echo one; echo two >&2; printf 'three'; exit 3"))
    assert code == 3
    assert out.of("stdout") == ["one", "three"]
    assert out.of("stderr") == ["two"]


def test_carriage_returns_split_lines_like_newlines(tmp_path: Path) -> None:
    code, out = _run(tmp_path, ["printf", r"\r 10%%\r 50%%\r100%%\r\ndone\n\nend"])
    assert code == 0
    assert out.of("stdout") == [" 10%", " 50%", "100%", "done", "", "end"]


def test_lines_are_streamed_as_they_come(tmp_path: Path) -> None:
    # The process prints its last line only after the caller has seen its first one, so a run that
    # delivered output only at exit would end with 'never seen' instead.
    seen = tmp_path / "first-seen"
    script = (
        "import pathlib, sys, time\n"
        "print('first', flush=True)\n"
        f"flag = pathlib.Path({str(seen)!r})\n"
        "deadline = time.monotonic() + 120\n"
        "while not flag.exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('last' if flag.exists() else 'never seen')\n"
    )
    out = Output()

    def on_output(line: str, stream: str) -> None:
        out(line, stream)
        if line == "first":
            seen.touch()

    code = run_trial_process(
        tmp_path, [sys.executable, "-u", "-c", script], dict(os.environ), on_output=on_output
    )
    assert code == 0
    assert out.of("stdout") == ["first", "last"]


def test_the_work_folder_is_the_current_folder(tmp_path: Path) -> None:
    code, out = _run(tmp_path, ["pwd"])
    assert code == 0 and Path(out.of("stdout")[0]).resolve() == tmp_path.resolve()


def test_the_startup_hook_is_sourced_before_the_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("export FROM_HOOK=hooked\necho hook ran\n")
    code, out = _run(tmp_path, ["sh", "-c", 'echo "value=$FROM_HOOK"; exit 5'])
    assert code == 5
    assert out.of("stdout") == ["hook ran", "value=hooked"]


def test_a_failing_startup_hook_stops_the_trial(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("exit 7\n")
    code, out = _run(tmp_path, ["sh", "-c", "echo should not run"])
    assert code == 7 and out.of("stdout") == []


def test_a_missing_program_is_exit_code_127_with_a_message(tmp_path: Path) -> None:
    code, out = _run(tmp_path, ["/no/such/program"])
    assert code == 127
    assert "cannot start the entrypoint '/no/such/program'" in out.of("stderr")[0]


def test_a_signal_is_a_negative_exit_code(tmp_path: Path) -> None:
    code, _ = _run(tmp_path, ["sh", "-c", "kill -9 $$"])
    assert code == -signal.SIGKILL


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} is still running {timeout:.0f} s after the trial ended")
        time.sleep(0.05)


def test_stop_terminates_the_whole_process_group(tmp_path: Path) -> None:
    stop = threading.Event()
    pid_file = tmp_path / "child.pid"
    # The entrypoint starts a grandchild and waits: stopping must reach both.
    script = f"sleep 300 & echo $! > {pid_file}; echo started; wait"
    code, out = _run(tmp_path, ["sh", "-c", script], stop=stop, kill_grace=5.0, stop_on="started")
    assert code == -signal.SIGTERM
    assert out.of("stdout") == ["started"]
    assert not _alive(int(pid_file.read_text()))


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    stop = threading.Event()
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"
    # Stopped only once it says its SIGTERM handler is in place, so SIGTERM is ignored for sure.
    code, out = _run(tmp_path, [sys.executable, "-c", script], stop=stop, kill_grace=0.5, stop_on="ready")
    assert code == -signal.SIGKILL
    assert out.of("stdout") == ["ready"]


def test_leftover_background_processes_do_not_hang_the_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    code, _ = _run(tmp_path, ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; exit 0"])
    assert code == 0
    _wait_dead(int(pid_file.read_text()))


# --- prepare_workdir ------------------------------------------------------------------------------


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_prepare_workdir_unpacks_the_context(tmp_path: Path) -> None:
    dest = prepare_workdir(_tar_gz({"train.py": b"print(1)\n", "pkg/m.py": b""}), tmp_path / "work")
    assert dest == tmp_path / "work"
    assert (dest / "train.py").read_bytes() == b"print(1)\n" and (dest / "pkg" / "m.py").exists()


def test_prepare_workdir_without_a_context_makes_an_empty_folder(tmp_path: Path) -> None:
    assert list(prepare_workdir(b"", tmp_path / "work").iterdir()) == []


def test_prepare_workdir_refuses_an_escaping_archive(tmp_path: Path) -> None:
    from det_airflow.errors import ContextError

    with pytest.raises(ContextError):
        prepare_workdir(_tar_gz({"../evil.py": b""}), tmp_path / "work")


# --- running as the trial user --------------------------------------------------------------------

as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="switching to another user needs root (CI runs as root)"
)


@pytest.fixture
def passable(tmp_path: Path) -> Iterator[Path]:
    """A folder another user may pass through (pytest's own temporary folders are private to root)."""
    base = Path(tempfile.mkdtemp(prefix="det-trial-test-"))
    base.chmod(0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@as_root
def test_as_root_trials_run_as_the_dedicated_user() -> None:
    user = trial_user(None)
    assert user is not None and user.name == DEFAULT_TRIAL_USER and user.uid != 0
    assert pwd.getpwnam(DEFAULT_TRIAL_USER).pw_uid == user.uid


@as_root
def test_a_configured_trial_user_that_does_not_exist_is_a_clear_error() -> None:
    with pytest.raises(TrialIsolationError, match=r"\[det\] trial_user = no-such-det-user: no such user"):
        trial_user("no-such-det-user")
    with pytest.raises(TrialIsolationError, match="must not run as root"):
        trial_user("root")


def test_a_trial_user_without_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(
        TrialIsolationError, match=r"trial_user = nobody: the worker runs as uid 1000, not root"
    ):
        trial_user("nobody")
    assert trial_user(None) is None  # not root and nothing set: the worker's own user


@as_root
def test_the_trial_process_runs_as_that_user_with_no_other_group(passable: Path) -> None:
    user = trial_user("nobody")
    assert user is not None
    secret = passable / "airflow.cfg"
    secret.write_text("[api_auth]\njwt_secret = s3cret\n")
    secret.chmod(0o600)
    workdir = passable / "trial"
    workdir.mkdir()
    hand_over(workdir, user)
    out = Output()
    script = f'id -u; id -G; cat {secret} || echo "denied"; touch {passable}/x || echo "no write"; touch mine'
    code = run_trial_process(workdir, ["sh", "-c", script], {"PATH": os.defpath}, on_output=out, user=user)
    assert code == 0, out.lines
    assert out.of("stdout") == [str(user.uid), str(user.gid), "denied", "no write"]
    assert "s3cret" not in " ".join(out.of("stderr"))
    assert (workdir / "mine").stat().st_uid == user.uid


@as_root
def test_the_work_folder_is_handed_to_the_trial_user_and_no_one_else(passable: Path) -> None:
    user = trial_user("nobody")
    assert user is not None
    workdir = prepare_workdir(_tar_gz({"train.py": b"print(1)\n", "pkg/m.py": b""}), passable / "w")
    write_trial_files(TrialSpec.from_dict(SPEC), workdir)
    hand_over(workdir, user)
    owners = {p.lstat().st_uid for p in [workdir, *workdir.rglob("*")]}
    assert owners == {user.uid}
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o700


@as_root
def test_a_folder_the_trial_user_cannot_pass_is_named_with_the_fix(passable: Path) -> None:
    user = trial_user("nobody")
    assert user is not None
    private = passable / "private"
    (private / "bin").mkdir(parents=True)
    (private / "bin" / "python3").write_text("")
    private.chmod(0o700)
    with pytest.raises(TrialIsolationError) as caught:
        check_trial_access(user, read=[private / "bin" / "python3"])
    assert f"cannot reach {private}/bin/python3: it may not pass through {private} (mode drwx------" in str(
        caught.value
    )
    assert f"chmod o+x {private}" in str(caught.value)
    private.chmod(0o711)
    check_trial_access(user, read=[private / "bin" / "python3"])


@as_root
def test_only_the_checkpoint_root_is_made_by_the_platform_and_nothing_is_handed_over(passable: Path) -> None:
    user = trial_user(uid=61184, gid=61184)
    assert user == TrialUser("det-61184", 61184, 61184)
    root = passable / "det-checkpoints"
    ensure_writable_dir(root, user, adopt=True)
    assert (root.stat().st_uid, stat.S_IMODE(root.stat().st_mode)) == (0, 0o1733)

    # A host_path pointing at a missing folder: root creates nothing; the trial may create it.
    missing = root / "team" / "run"
    ensure_writable_dir(missing, user)
    assert not (root / "team").exists()
    elsewhere = passable / "not-mine" / "checkpoints"
    (passable / "not-mine").mkdir(mode=0o755)
    with pytest.raises(
        TrialIsolationError, match=f"det-61184 cannot create {elsewhere} \\(in {elsewhere.parent}\\)"
    ):
        ensure_writable_dir(elsewhere, user)
    assert not elsewhere.exists()

    existing = passable / "existing"
    existing.mkdir(mode=0o755)
    with pytest.raises(
        TrialIsolationError, match=f"cannot write to {existing}: make it writable by uid 61184"
    ):
        ensure_writable_dir(existing, user)
    assert existing.stat().st_uid == 0  # a folder det does not own is never taken over


def test_a_killed_worker_takes_its_trial_process_along(tmp_path: Path) -> None:
    """The worker (here a Python process running the trial) dies by SIGKILL: no orphan trains on."""
    import subprocess

    pid_file = tmp_path / "trial.pid"
    (tmp_path / "trial.py").write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    (tmp_path / "worker.py").write_text(
        "import sys\n"
        "from det_airflow.trial_process import run_trial_process\n"
        f"run_trial_process({str(tmp_path)!r}, [sys.executable, 'trial.py'], {{}}, on_output=print)\n"
    )
    worker = subprocess.Popen([sys.executable, str(tmp_path / "worker.py")])
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the trial process never started"
            time.sleep(0.1)
        trial_pid = int(pid_file.read_text())
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(trial_pid):
            assert time.monotonic() < deadline, f"trial process {trial_pid} outlived its killed worker"
            time.sleep(0.1)
    finally:
        worker.kill()
        worker.wait(timeout=30)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@as_root
def test_a_trial_runs_as_its_owners_numeric_uid_without_a_passwd_entry(passable: Path) -> None:
    user = trial_user(uid=61190, gid=61190)
    assert user is not None
    workdir = passable / "w"
    workdir.mkdir()
    hand_over(workdir, user)
    out = Output()
    script = "import getpass, os; print(os.getuid(), os.getgid(), os.getgroups(), getpass.getuser())"
    code = run_trial_process(
        workdir, [sys.executable, "-c", script], {"PATH": "/usr/bin:/bin"}, on_output=out, user=user
    )
    assert code == 0, out.lines
    assert out.lines == [("61190 61190 [] det-61190", "stdout")]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating folders as another user needs root")
def test_a_folder_a_config_names_is_made_as_the_trial_user_never_as_root() -> None:
    import tempfile

    from det_airflow.trial_process import TrialIsolationError, TrialUser, make_dirs_as

    user = TrialUser("det-61190", 61190, 61190)
    # Under /tmp itself: pytest's own tmp_path lies in a folder only root may pass through.
    with tempfile.TemporaryDirectory(prefix="det-make-dirs-") as folder:
        base = Path(folder)
        base.chmod(0o711)
        share = base / "share"
        share.mkdir()
        share.chmod(0o1777)
        make_dirs_as(share / "a" / "b", user)
        made = (share / "a" / "b").stat()
        assert (made.st_uid, made.st_gid) == (61190, 61190)
        private = base / "private"
        private.mkdir(mode=0o700)
        with pytest.raises(
            TrialIsolationError, match=r"trial user det-61190 cannot create .*private/x: .*denied"
        ):
            make_dirs_as(private / "x", user)
        assert not (private / "x").exists()
