"""Running worker processes for a launcher: start them, pass signals on, and never leave one behind.

Every launcher follows the same rules (docs/semantics.md §4): when a worker exits non-zero the
others are terminated and the launcher exits with that worker's status; it exits 0 once all exited
0; SIGTERM, SIGINT and SIGHUP are passed on to the workers, and workers still alive ``grace``
seconds later are killed. A worker also receives SIGTERM if its launcher dies (Linux).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_POLL_INTERVAL = 0.05
_PR_SET_PDEATHSIG = 1


def exit_status(returncode: int) -> int:
    """A child's return code as an exit status: killed by signal N becomes 128 + N, as in a shell."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """The workers of one launcher. Use it as a context manager around :meth:`start` and :meth:`wait`.

    Example::

        with Supervisor() as workers:
            workers.start(["python3", "train.py"])
            sys.exit(workers.wait())
    """

    def __init__(self, *, grace: float = 10.0, watch_parent: bool = False) -> None:
        self.grace = grace
        self._watch_parent = watch_parent
        self._parent = os.getppid()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._own_group: set[int] = set()  # pids started in a session of their own
        self._previous: dict[int, Any] = {}
        self._stopping_since: float | None = None

    def __enter__(self) -> Supervisor:
        for sig in FORWARDED_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        try:
            self._terminate([p for p in self._procs if p.poll() is None])
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        new_session: bool = False,
        **popen_kwargs: Any,
    ) -> subprocess.Popen[bytes]:
        """Start a worker; ``new_session`` puts it in a process group of its own (signals from the
        terminal or to this launcher's group reach it only through this supervisor)."""
        proc = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            start_new_session=new_session,
            preexec_fn=die_with_parent(signal.SIGTERM),
            **popen_kwargs,
        )
        self._procs.append(proc)
        if new_session:
            self._own_group.add(proc.pid)
        return proc

    def wait(self) -> int:
        """Wait for the workers; answers the exit status of the launcher."""
        while True:
            alive = []
            for proc in self._procs:
                code = proc.poll()
                if code is None:
                    alive.append(proc)
                elif code != 0:
                    self._terminate([p for p in self._procs if p.poll() is None])
                    return exit_status(code)
            if not alive:
                return 0
            if self._watch_parent and self._stopping_since is None and os.getppid() != self._parent:
                # Orphaned (the process that started us is gone): do not outlive it.
                self._send(signal.SIGTERM)
            if self._stopping_since is not None and time.monotonic() - self._stopping_since > self.grace:
                self._send(signal.SIGKILL, alive)
            time.sleep(_POLL_INTERVAL)

    def _forward(self, signum: int, frame: types.FrameType | None) -> None:
        self._send(signal.Signals(signum))

    def _send(self, sig: signal.Signals, procs: Sequence[subprocess.Popen[bytes]] | None = None) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) and self._stopping_since is None:
            self._stopping_since = time.monotonic()
        for proc in self._procs if procs is None else procs:
            if proc.poll() is None:
                self._signal(proc, sig)

    def _signal(self, proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        try:
            if proc.pid in self._own_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _terminate(self, procs: Sequence[subprocess.Popen[bytes]]) -> None:
        """SIGTERM, then SIGKILL what is left after ``grace`` seconds."""
        for proc in procs:
            self._signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()


def die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A preexec function asking Linux to send the child ``sig`` when the thread that starts it ends
    (with this process, as a killed worker's does); None where Linux is not."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return set_parent_death_signal
