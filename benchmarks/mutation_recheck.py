"""Runs the tests that start the package in other processes against mutmut's surviving mutants.

mutmut picks the tests for a mutant from what each test called in its own process, so tests that
run det_airflow in child processes (torchrun workers, a training script) never count. Those tests
do see a mutant when run inside ``mutants/`` with ``MUTANT_UNDER_TEST`` set: their children import
the mutated package from there and inherit the variable. This runs them, one survivor at a time,
and prints which they kill.

    .venv/bin/python benchmarks/mutation_recheck.py 'det_airflow.core._distributed.*' \
        -- tests/unit/core/test_distributed.py -k 'two_workers or two_nodes'

Run after ``make mutation`` (it reads ``mutmut results``); the counts go into RESULTS.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"


def survivors(patterns: list[str]) -> list[str]:
    """The survived and untested mutants matching ``patterns``, from ``mutmut results``."""
    out = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "mutmut"), "results", "--all", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = []
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if status in ("survived", "no tests") and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            names.append(name)
    return names


def killed_by(name: str, pytest_args: list[str], timeout: float) -> str:
    """ "killed", "timeout" (the tests hung: workers waiting in a collective that never comes, which
    counts as killed, as mutmut counts its own timeouts) or "survived"."""
    env = {**os.environ, "MUTANT_UNDER_TEST": name}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *pytest_args],
        cwd=MUTANTS,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: a hung run's workers go with it
    )
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "timeout"
    return "killed" if code != 0 else "survived"


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("patterns", nargs="+", help="mutant names, as globs; then -- and the tests to run")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds before a run counts as hung (default 60)"
    )
    args = parser.parse_args(argv[:split])
    pytest_args = argv[split + 1 :]
    if not MUTANTS.is_dir():
        print("no mutants/ folder: run `make mutation` first", file=sys.stderr)
        return 2
    names = survivors(args.patterns)
    if not pytest_args or not names:
        print(f"{len(names)} survivors match; nothing to run" if names else "no survivor matches")
        return 0
    started = time.monotonic()
    alive = []
    for i, name in enumerate(names, 1):
        verdict = killed_by(name, pytest_args, args.timeout)
        print(f"[{i}/{len(names)}] {verdict} {name}", flush=True)
        if verdict == "survived":
            alive.append(name)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{len(names) - len(alive)} of {len(names)} killed in {minutes:.1f} min; still alive:")
    for name in alive:
        print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
