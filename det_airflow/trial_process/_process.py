"""Running a trial's process on this host: its start, its output, and its stop.

The process runs in its own process group, so that stopping it stops everything it started, and
dies with the process that started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from det_airflow.launchers._supervisor import die_with_parent
from det_airflow.trial_process._isolation import TrialUser
from det_airflow.trial_process._output_lines import OnOutput, pump_lines

STARTUP_HOOK = "startup-hook.sh"


def run_trial_process(
    workdir: str | os.PathLike[str],
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    on_output: OnOutput,
    stop: threading.Event | None = None,
    kill_grace: float = 10.0,
    user: TrialUser | None = None,
    stop_signal: Callable[[], signal.Signals] | None = None,
) -> int:
    """Run ``argv`` in ``workdir`` and wait for it; answers its exit code (negative: killed by that signal).

    ``startup-hook.sh`` in ``workdir`` is sourced first, in the same shell, so its exports reach the
    entrypoint. Output lines (split on ``\\n`` and ``\\r``) go to ``on_output(line, "stdout"|"stderr")``
    as they come, one call at a time. Setting ``stop`` sends SIGTERM to the process group, then
    SIGKILL after ``kill_grace`` seconds (``stop_signal``, asked when ``stop`` is set, may name
    another first signal: a caller forwards the one it received); whatever the entrypoint left
    running when it exits is killed.
    With ``user`` the process runs as that user, its primary group and no other group.
    """
    workdir = Path(workdir)
    command = list(argv)
    if (workdir / STARTUP_HOOK).is_file():
        command = ["sh", "-c", f'. ./{STARTUP_HOOK} && exec "$@"', "sh", *command]
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": []}
        # A numeric uid has no /etc/passwd entry: getpass.getuser() reads these first.
        env = {**env, "USER": user.name, "LOGNAME": user.name}
    try:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, which stop signals as a whole
            # A worker killed mid-run takes its trial along: the master restarts the trial elsewhere
            # and no orphan keeps training (and writing checkpoints) beside the new run.
            preexec_fn=die_with_parent(signal.SIGKILL),
            **as_user,
        )
    except OSError as exc:
        on_output(f"cannot start the entrypoint {command[0]!r}: {exc.strerror or exc}", "stderr")
        return 127
    lock = threading.Lock()

    def emit(line: str, stream: str) -> None:
        with lock:
            on_output(line, stream)

    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=pump_lines, args=(proc.stdout, "stdout", emit), daemon=True),
        threading.Thread(target=pump_lines, args=(proc.stderr, "stderr", emit), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        _wait(proc, stop, kill_grace, stop_signal)
    finally:
        if proc.poll() is None:  # an exception in the caller's thread, e.g. KeyboardInterrupt
            _terminate(proc, kill_grace)
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers holding the pipes open
        for reader in readers:
            reader.join(timeout=5.0)
    return proc.returncode


def _wait(
    proc: subprocess.Popen[bytes],
    stop: threading.Event | None,
    kill_grace: float,
    stop_signal: Callable[[], signal.Signals] | None,
) -> None:
    """Wait for ``proc`` to exit, or until ``stop`` is set (then terminate it)."""
    while True:
        try:
            proc.wait(timeout=None if stop is None else 0.1)
            return
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                _terminate(proc, kill_grace, stop_signal() if stop_signal else signal.SIGTERM)
                return


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _terminate(
    proc: subprocess.Popen[bytes], kill_grace: float, first: signal.Signals = signal.SIGTERM
) -> None:
    """Signal the process group (``first``), then SIGKILL it if the process is still there after
    ``kill_grace``."""
    _signal_group(proc.pid, first)
    try:
        proc.wait(timeout=kill_grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
