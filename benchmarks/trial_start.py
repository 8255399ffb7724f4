"""Trial process start: `import det_airflow` and `core.init()` against Python's own start.

Each measurement is one fresh interpreter (this one, `sys.executable`) timed from spawn to exit:

- `python -c pass`: Python's own start, the baseline;
- `import det_airflow`;
- local: `det.core.init()` off-cluster, writing to a local store in a temporary folder;
- trial: `det.core.init()` with the whole environment a trial process gets
  (`det_airflow.trial_process.trial_environment`: master URL, trial token, hparams, config file),
  the master being a small HTTP server that this script starts;
- trial + first call: the same, then one `core_context.preempt.should_preempt()`, the first request
  a trial makes to the master (it pays for the HTTP client).

With `--before DIR` (a folder holding an older `det_airflow/` package, e.g. from
`git archive HEAD det_airflow | tar -x -C DIR`), every scenario also runs with that package first
on `PYTHONPATH`, so that the old and the new code are measured in the same rounds. Rounds run the
scenarios in turn (before and after alternating), so machine noise falls on all of them alike. The
figures are the median, the spread (min–max) over the rounds, the median cost beyond Python's start,
and the ratio to Python's start, both in wall-clock time and in the CPU time of the process (which
other work on a shared machine disturbs less).

    .venv/bin/python benchmarks/trial_start.py [--rounds 15] [--before DIR] [--importtime]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from det_airflow.trial_process import TrialSpec, trial_environment, write_trial_files  # noqa: E402

INIT = "import det_airflow as det\nctx = det.core.init()\n"
SCENARIOS: dict[str, str] = {
    "python -c pass": "pass",
    "import det_airflow": "import det_airflow",
    "local core.init()": INIT,
    "trial core.init()": INIT,
    "trial + first call": INIT + "ctx.preempt.should_preempt()\n",
}
TRIAL_SCENARIOS = frozenset({"trial core.init()", "trial + first call"})


class _Master(BaseHTTPRequestHandler):
    """Answers the trial routes the way the master would, with nothing behind them."""

    def do_GET(self) -> None:
        self._answer({"preempt": False} if self.path.endswith("/preemption") else {})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer({})

    def _answer(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextmanager
def tiny_master() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Master)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def environments(workdir: Path, master_url: str) -> tuple[dict[str, str], dict[str, str]]:
    """The environment of an off-cluster run and that of a trial process on the cluster."""
    spec = TrialSpec(
        trial_id=7,
        experiment_id=3,
        request_id="r-7",
        trial_seed=42,
        hparams={"learning_rate": 0.1, "layers": 2},
        config={
            "name": "start",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
            "hyperparameters": {"learning_rate": 0.1, "layers": 2},
        },
    )
    write_trial_files(spec, workdir)
    trial = trial_environment(spec, master_url=master_url, token="t0ken", workdir=workdir)
    local = {k: v for k, v in trial.items() if not k.startswith("DET_")}
    local["DET_LOCAL_STORE"] = str(workdir / "store")
    return local, trial


def with_package(env: Mapping[str, str], package_dir: str | None) -> dict[str, str]:
    out = dict(env)
    if package_dir:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (package_dir, env.get("PYTHONPATH", "")) if p)
    return out


def run_once(code: str, env: Mapping[str, str], cwd: Path) -> tuple[float, float]:
    """Wall-clock seconds from spawn to exit, and the CPU seconds (user + system) of the process."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=cwd)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"`python -c {code!r}` exited with {process.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def heaviest_imports(code: str, env: Mapping[str, str], cwd: Path, count: int = 12) -> list[tuple[int, str]]:
    """The top-level imports with the largest cumulative `-X importtime` (microseconds)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("  "):
            rows.append((int(parts[1]), parts[2].strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--before", help="a folder with an older det_airflow/ package to compare with")
    parser.add_argument(
        "--importtime", action="store_true", help="list the heaviest imports of a trial's init"
    )
    args = parser.parse_args()
    trees = (
        {"after": None} if not args.before else {"before": str(Path(args.before).resolve()), "after": None}
    )

    with tempfile.TemporaryDirectory() as tmp, tiny_master() as master_url:
        workdir = Path(tmp)
        local_env, trial_env = environments(workdir, master_url)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        cases = [
            (tree, name)
            for name in SCENARIOS
            for tree in trees
            if not (name == "python -c pass" and tree == "before")
        ]
        for case in cases:  # warm the file cache and the .pyc files
            tree, name = case
            env = with_package(trial_env if name in TRIAL_SCENARIOS else local_env, trees[tree])
            run_once(SCENARIOS[name], env, workdir)
        for _ in range(args.rounds):
            for case in cases:
                tree, name = case
                env = with_package(trial_env if name in TRIAL_SCENARIOS else local_env, trees[tree])
                times.setdefault(case, []).append(run_once(SCENARIOS[name], env, workdir))

        print(f"{sys.executable} on {os.cpu_count()} CPUs, {args.rounds} rounds; times in ms")
        for column, what in (
            (0, "wall clock, spawn to exit"),
            (1, "CPU time of the process (user + system)"),
        ):
            base = statistics.median(t[column] for t in times[("after", "python -c pass")])
            print(f"\n{what}")
            print(
                f"{'scenario':<22} {'tree':<7} {'median':>7} {'min':>7} {'max':>7} {'beyond py':>10} {'x py':>6}"
            )
            for tree, name in cases:
                runs = [t[column] for t in times[(tree, name)]]
                med = statistics.median(runs)
                label = "" if name == "python -c pass" else tree
                print(
                    f"{name:<22} {label:<7} {med * 1e3:7.1f} {min(runs) * 1e3:7.1f} {max(runs) * 1e3:7.1f}"
                    f" {(med - base) * 1e3:10.1f} {med / base:6.2f}"
                )
        if args.importtime:
            for tree in trees:
                print(f"\nheaviest imports of `trial + first call` ({tree}), cumulative ms:")
                env = with_package(trial_env, trees[tree])
                for micros, module in heaviest_imports(SCENARIOS["trial + first call"], env, workdir):
                    print(f"  {micros / 1e3:7.1f}  {module}")


if __name__ == "__main__":
    main()
