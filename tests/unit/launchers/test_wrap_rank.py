"""wrap_rank: every line of stdout and stderr prefixed with the rank; the exit status passed through."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from det_airflow.launchers.wrap_rank import LinePrefixer, resolve_rank

from .conftest import wait_for_files

WRAP_RANK = [sys.executable, "-m", "det_airflow.launchers.wrap_rank"]


def test_lines_end_at_newlines_and_carriage_returns() -> None:
    prefixer = LinePrefixer(b"[rank=2] ")
    assert prefixer.feed(b"one\ntwo\r50%\r100%\n\n") == [
        b"[rank=2] one\n",
        b"[rank=2] two\r",
        b"[rank=2] 50%\r",
        b"[rank=2] 100%\n",
        b"[rank=2] \n",
    ]


def test_a_line_comes_out_whole_however_it_arrives() -> None:
    prefixer = LinePrefixer(b"[rank=0] ")
    assert [prefixer.feed(chunk) for chunk in (b"par", b"tial\r", b"\nnext", b" line\n")] == [
        [],
        [],
        [b"[rank=0] partial\r\n"],  # a \r\n split across reads is one line break
        [b"[rank=0] next line\n"],
    ]
    assert prefixer.flush() == b""


def test_a_partial_line_is_flushed_and_then_continued() -> None:
    prefixer = LinePrefixer(b"[rank=0] ")
    assert prefixer.feed(b"Password: ") == []
    assert prefixer.flush() == b"[rank=0] Password: "
    assert prefixer.feed(b"ok\nnext\n") == [b"ok\n", b"[rank=0] next\n"]
    assert prefixer.feed(b"bar\r") == []
    assert prefixer.flush() == b"[rank=0] bar\r"
    assert prefixer.feed(b"\nafter\n") == [b"\n", b"[rank=0] after\n"]


def test_the_rank_is_a_number_or_the_first_variable_set() -> None:
    assert resolve_rank("3", {}) == 3
    assert resolve_rank("RANK", {"RANK": "1"}) == 1
    env = {"OMPI_COMM_WORLD_RANK": "4"}
    assert resolve_rank("HOROVOD_RANK,OMPI_COMM_WORLD_RANK", env) == 4
    assert resolve_rank("HOROVOD_RANK,OMPI_COMM_WORLD_RANK", {**env, "HOROVOD_RANK": "5"}) == 5
    with pytest.raises(ValueError, match="none of HOROVOD_RANK, OMPI_COMM_WORLD_RANK is set"):
        resolve_rank("HOROVOD_RANK,OMPI_COMM_WORLD_RANK", {})
    with pytest.raises(ValueError, match="is not a rank"):
        resolve_rank("RANK", {"RANK": "x"})


def test_both_streams_are_prefixed_and_the_exit_status_passes_through(child_env: dict[str, str]) -> None:
    script = "import sys; print('out'); sys.stderr.write('err\\r50%\\n'); sys.exit(5)"
    done = subprocess.run(
        [*WRAP_RANK, "3", sys.executable, "-c", script], env=child_env, capture_output=True, timeout=60
    )
    assert done.returncode == 5
    assert done.stdout == b"[rank=3] out\n"
    assert done.stderr == b"[rank=3] err\r[rank=3] 50%\n"


def test_the_rank_from_environment_variables_and_a_separator(child_env: dict[str, str]) -> None:
    child_env["OMPI_COMM_WORLD_RANK"] = "6"
    done = subprocess.run(
        [*WRAP_RANK, "HOROVOD_RANK,OMPI_COMM_WORLD_RANK", "--", sys.executable, "-c", "print('hi')"],
        env=child_env,
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, b"[rank=6] hi\n")


def test_a_script_killed_by_a_signal_gives_128_plus_the_signal(child_env: dict[str, str]) -> None:
    script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    done = subprocess.run([*WRAP_RANK, "0", sys.executable, "-c", script], env=child_env, timeout=60)
    assert done.returncode == 128 + signal.SIGKILL


def test_usage_errors(child_env: dict[str, str]) -> None:
    assert subprocess.run([*WRAP_RANK, "0"], env=child_env, capture_output=True, timeout=60).returncode == 2
    missing = subprocess.run(
        [*WRAP_RANK, "0", "/no/such/program"], env=child_env, capture_output=True, timeout=60
    )
    assert missing.returncode == 127
    assert b"cannot run '/no/such/program'" in missing.stderr


def test_sigterm_reaches_the_script(tmp_path: Path, child_env: dict[str, str]) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = (
        "import signal, sys, time, pathlib\n"
        f"def stop(*_): pathlib.Path({str(got)!r}).write_text('TERM'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"pathlib.Path({str(ready)!r}).write_text('1')\n"
        "time.sleep(120)\n"
    )
    # A session of its own: the signal goes to wrap_rank alone, not to the script's group too.
    proc = subprocess.Popen(
        [*WRAP_RANK, "0", sys.executable, "-c", script], env=child_env, start_new_session=True
    )
    try:
        wait_for_files([ready])
        time.sleep(0.2)  # let wrap_rank's handlers be in place (they are before the script starts)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert got.read_text() == "TERM"
    finally:
        proc.kill()
