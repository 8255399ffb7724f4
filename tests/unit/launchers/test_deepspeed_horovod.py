"""deepspeed and horovod launchers: the tool's command from the trial's containers, a clear error
when the tool is missing, and supervision of a real (stand-in) tool process and its workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from det_airflow.launchers import deepspeed, horovod
from det_airflow.launchers._launch import Containers, ToolMissing, parse_args

from .conftest import wait_for_files, wait_gone

SCRIPT = ["python3", "train.py", "--lr", "1"]

# A stand-in for `deepspeed` / `horovodrun`: starts two workers (the command after `--module X` or
# from this interpreter on), each told its rank; like the real tools, when one fails it stops the
# others and exits with that status.
FAKE_TOOL = textwrap.dedent(
    """\
    #!{python}
    import os, subprocess, sys, time
    args = sys.argv[1:]
    if "--module" in args:
        command = [sys.executable, "-m", *args[args.index("--module") + 1:]]
    else:
        command = args[args.index("{python}"):]
    workers = [
        subprocess.Popen(command, env=dict(os.environ, RANK=str(rank), HOROVOD_RANK=str(rank)))
        for rank in range(2)
    ]
    while True:
        codes = [w.poll() for w in workers]
        failed = [c for c in codes if c]
        if failed or all(c == 0 for c in codes):
            for w in workers:
                if w.poll() is None:
                    w.terminate()
            for w in workers:
                w.wait()
            sys.exit(failed[0] if failed else 0)
        time.sleep(0.05)
    """
)

# Each worker writes its pid, then sleeps, or fails when its rank is FAIL_RANK: only once every
# worker is up, so that the failure always has another worker to stop, however slow its start.
WORKER = textwrap.dedent(
    """\
    import os, sys, time
    rank = os.environ["RANK"]
    print(f"worker {{rank}} up", flush=True)
    open(os.path.join(sys.argv[1], f"pid{{rank}}.tmp"), "w").write(str(os.getpid()))
    os.replace(os.path.join(sys.argv[1], f"pid{{rank}}.tmp"), os.path.join(sys.argv[1], f"pid{{rank}}"))
    if rank == os.environ.get("FAIL_RANK"):
        while not all(os.path.exists(os.path.join(sys.argv[1], f"pid{{r}}")) for r in range(2)):
            time.sleep(0.01)
        sys.exit(3)
    time.sleep(600)
    """
)


def test_overrides_before_a_double_dash_and_trial() -> None:
    overrides, script = parse_args("prog", "OVERRIDES", ["--zero_stage", "2", "--", "--trial", "model_def:T"])
    assert overrides == ["--zero_stage", "2"]
    assert script == [sys.executable, "-m", "det_airflow.pytorch.run_trial", "model_def:T"]
    with pytest.raises(SystemExit):
        parse_args("prog", "OVERRIDES", ["--zero_stage", "2", "--"])


def test_deepspeed_on_one_container_needs_no_hostfile() -> None:
    command = deepspeed.deepspeed_command(
        "/bin/ds", Containers(("127.0.0.1",), 2, 0), ["--x", "1"], SCRIPT, None
    )
    assert command[:7] == ["/bin/ds", "--num_nodes", "1", "--num_gpus", "2", "--master_addr", "127.0.0.1"]
    assert command[7] == "--master_port" and int(command[8]) > 0
    assert command[9:] == [
        "--no_local_rank",
        "--x",
        "1",
        "--module",
        "det_airflow.launchers.wrap_rank",
        "RANK",
        *SCRIPT,
    ]


def test_deepspeed_on_leased_gpus_names_them_rather_than_counting_from_zero() -> None:
    """deepspeed ignores CUDA_VISIBLE_DEVICES when given --num_gpus and would put the worker on GPU
    0; a slot that leased GPUs 3 and 5 names them."""
    command = deepspeed.deepspeed_command(
        "/bin/ds", Containers(("127.0.0.1",), 2, 0), [], SCRIPT, None, visible_devices="3,5"
    )
    assert command[:5] == ["/bin/ds", "--include", "localhost:3,5", "--master_addr", "127.0.0.1"]
    assert "--num_gpus" not in command


def test_deepspeed_across_containers_uses_a_hostfile(tmp_path: Path) -> None:
    where = Containers(("10.0.0.5", "10.0.0.6"), 4, 0)
    assert deepspeed.hostfile_text(where) == "10.0.0.5 slots=4\n10.0.0.6 slots=4\n"
    command = deepspeed.deepspeed_command("ds", where, [], SCRIPT, tmp_path / "hostfile")
    assert command[:8] == ["ds", "--hostfile", str(tmp_path / "hostfile"), "--master_addr", "10.0.0.5",
                           "--no_ssh_check", "--master_port", "29400"]  # fmt: skip


def test_horovodrun_gets_every_containers_slots() -> None:
    where = Containers(("10.0.0.5", "10.0.0.6"), 2, 0)
    command = horovod.horovodrun_command("horovodrun", where, ["--verbose"], SCRIPT)
    assert command == [
        "horovodrun", "-np", "4", "-H", "10.0.0.5:2,10.0.0.6:2", "-p", "12350", "--verbose",
        sys.executable, "-m", "det_airflow.launchers.wrap_rank", "HOROVOD_RANK,OMPI_COMM_WORLD_RANK", *SCRIPT,
    ]  # fmt: skip


def test_other_containers_serve_ssh_or_say_sshd_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissing, match=r"`sshd` is not installed in this image"):
        horovod.build([], SCRIPT, Containers(("10.0.0.5", "10.0.0.6"), 2, 1), {})


@pytest.mark.parametrize(("module", "tool"), [("deepspeed", "deepspeed"), ("horovod", "horovodrun")])
def test_a_missing_tool_is_one_clear_line_and_exit_127(
    child_env: dict[str, str], module: str, tool: str, tmp_path: Path
) -> None:
    # Not the interpreter's folder: a virtual environment with deepspeed installed has it there.
    child_env["PATH"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", f"det_airflow.launchers.{module}", "python3", "train.py"],
        env=child_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 127
    assert f"`{tool}` is not installed in this image" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _with_fake_tool(tmp_path: Path, env: dict[str, str], tool: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / tool
    fake.write_text(FAKE_TOOL.format(python=sys.executable))
    fake.chmod(0o755)
    (tmp_path / "worker.py").write_text(WORKER.format())
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}


@pytest.mark.parametrize(("module", "tool"), [("deepspeed", "deepspeed"), ("horovod", "horovodrun")])
def test_a_failing_worker_stops_the_others_and_the_launcher_fails(
    tmp_path: Path, child_env: dict[str, str], module: str, tool: str
) -> None:
    env = {**_with_fake_tool(tmp_path, child_env, tool), "FAIL_RANK": "1"}
    launcher = subprocess.Popen(
        [sys.executable, "-m", f"det_airflow.launchers.{module}", sys.executable, str(tmp_path / "worker.py"), str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_files([tmp_path / "pid0", tmp_path / "pid1"])
    survivor = int((tmp_path / "pid0").read_text())

    out, err = launcher.communicate(timeout=120)

    assert launcher.returncode == 3, out + err
    assert "[rank=0] worker 0 up" in out and "[rank=1] worker 1 up" in out
    assert wait_gone([survivor]), "rank 0 outlived the launcher"


@pytest.mark.parametrize(("module", "tool"), [("deepspeed", "deepspeed"), ("horovod", "horovodrun")])
def test_sigterm_reaches_every_worker(
    tmp_path: Path, child_env: dict[str, str], module: str, tool: str
) -> None:
    env = _with_fake_tool(tmp_path, child_env, tool)
    launcher = subprocess.Popen(
        [sys.executable, "-m", f"det_airflow.launchers.{module}", sys.executable, str(tmp_path / "worker.py"), str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_files([tmp_path / "pid0", tmp_path / "pid1"])
    workers = [int((tmp_path / f"pid{rank}").read_text()) for rank in (0, 1)]

    launcher.send_signal(signal.SIGTERM)
    launcher.communicate(timeout=120)

    assert launcher.returncode != 0
    assert wait_gone(workers), "a worker outlived SIGTERM to its launcher"
