"""The launchers' worker handling: one failure ends all, statuses pass through, nothing is left behind."""

from __future__ import annotations

import signal
import subprocess
import sys

from det_airflow.launchers._supervisor import Supervisor, exit_status

from .conftest import is_gone


def test_exit_status_of_a_signal_is_128_plus_it() -> None:
    assert exit_status(0) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGTERM) == 128 + signal.SIGTERM


def test_all_workers_exiting_0_is_0() -> None:
    with Supervisor() as workers:
        for _ in range(2):
            workers.start([sys.executable, "-c", "pass"])
        assert workers.wait() == 0


def test_a_failing_worker_terminates_the_others_and_gives_its_status() -> None:
    with Supervisor(grace=5.0) as workers:
        sleeper = workers.start([sys.executable, "-c", "import time; time.sleep(300)"])
        workers.start([sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"])
        assert workers.wait() == 3
    assert sleeper.poll() == -signal.SIGTERM


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"
    with Supervisor(grace=0.5) as workers:
        proc = workers.start([sys.executable, "-c", stubborn], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        workers.start([sys.executable, "-c", "import sys; sys.exit(1)"])
        assert workers.wait() == 1
    assert proc.returncode == -signal.SIGKILL
    assert is_gone(proc.pid)
