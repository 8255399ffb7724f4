"""Per-trial overhead side by side: det-airflow, plain Airflow mapped tasks and Ray Tune.

The same training script (orchestration_overhead.py's: it sleeps WORK seconds in 10 steps and
reports a metric at each, then a validation metric) runs as a det experiment, as a plain mapped-task
DAG and as a Ray Tune function trainable (with `reuse_actors` on and off), all on `--slots` slots, in
alternating rounds within one run. Per-trial overhead is the wall time each trial costs beyond its
training, amortized at the concurrency (as in orchestration_overhead.py):

    overhead per trial = wall × slots / trials − mean training time

Walls: the det experiment from `POST /experiments` to COMPLETED; the plain DAG from its trigger to
success; Ray Tune's `Tuner.fit()` call to its return (after `ray.init()`, which is a one-off start
like Airflow's, not counted). Also measured: submission → the first trial's code running (det), and
`fit()` → its first trial's code running and first report (Ray Tune).

Ray Tune runs from its own virtual environment (`--ray-venv`, made with `ray[tune]` from PyPI when
missing), so det-airflow's environment gets nothing of Ray.

    .venv/bin/python benchmarks/ray_tune_side_by_side.py [--slots 4] [--repeat 3]
        [--workloads 16x3,64x1,200x0] [--ray-venv build/ray-venv]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import orchestration_overhead as orchestration  # noqa: E402

RAY_REQUIREMENT = "ray[tune]==2.60.0"

# Runs in the Ray venv: one Tuner.fit() of TRIALS trials on SLOTS CPUs; prints what it measured.
RAY_DRIVER = r"""
import json, os, sys, time

import ray
from ray import tune

trials, slots, work, reuse, times, storage = (
    int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1", sys.argv[5], sys.argv[6]
)


def trainable(config):
    start = time.time()
    steps = 10
    first = None
    for step in range(1, steps + 1):
        time.sleep(work / steps)
        tune.report({"loss": 1.0 / step, "step": step})
        first = first or time.time()
    tune.report({"loss": 0.1, "validation": 1})
    end = time.time()
    with open(os.path.join(times, f"{os.getpid()}-{start}.json"), "w") as f:
        json.dump({"start": start, "end": end, "first_report": first}, f)


begun = time.time()
ray.init(num_cpus=slots, include_dashboard=False, log_to_driver=False, configure_logging=False)
started = time.time()
tuner = tune.Tuner(
    tune.with_resources(trainable, {"cpu": 1}),
    param_space={"lr": tune.uniform(0.0, 1.0)},
    tune_config=tune.TuneConfig(
        num_samples=trials, max_concurrent_trials=slots, reuse_actors=reuse, metric="loss", mode="min"
    ),
    run_config=tune.RunConfig(storage_path=storage, name="bench", verbose=0),
)
t0 = time.time()
results = tuner.fit()
wall = time.time() - t0
errors = sum(1 for r in results if r.error)
ray.shutdown()
print(json.dumps({"wall": wall, "t0": t0, "init": started - begun, "errors": errors}))
"""


@dataclass
class Round:
    wall: float
    work: list[float]
    first_code: float | None = None  # submission (fit()) → the first trial's code running
    first_report: float | None = None  # Ray Tune: fit() → the first report


@dataclass
class Path_:
    name: str
    rounds: list[Round] = field(default_factory=list)

    def overheads(self, slots: int, trials: int) -> list[float]:
        return [r.wall * slots / trials - statistics.mean(r.work) for r in self.rounds]


def ensure_ray_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"making {venv} with {RAY_REQUIREMENT} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", RAY_REQUIREMENT], check=True)
    return python


def run_ray(
    python: Path, driver: Path, base: Path, trials: int, slots: int, work: float, reuse: bool
) -> Round:
    times = Path(tempfile.mkdtemp(prefix="ray-times-", dir=base))
    storage = Path(tempfile.mkdtemp(prefix="ray-results-", dir=base))
    done = subprocess.run(
        [
            str(python),
            str(driver),
            str(trials),
            str(slots),
            str(work),
            "1" if reuse else "0",
            str(times),
            str(storage),
        ],
        capture_output=True,
        text=True,
        env={"RAY_USAGE_STATS_ENABLED": "0", "PATH": "/usr/bin:/bin", "HOME": str(base)},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"Ray Tune run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if answer["errors"]:
        raise RuntimeError(f"{answer['errors']} Ray Tune trials failed:\n{done.stderr[-3000:]}")
    records = [json.loads(p.read_text()) for p in times.glob("*.json")]
    if len(records) != trials:
        raise RuntimeError(f"Ray Tune: expected {trials} timings, got {len(records)}")
    return Round(
        wall=answer["wall"],
        work=[r["end"] - r["start"] for r in records],
        first_code=min(r["start"] for r in records) - answer["t0"],
        first_report=min(r["first_report"] for r in records) - answer["t0"],
    )


def first_code(folder: Path, t0_wall: float) -> float:
    return min(json.loads(p.read_text())["start"] for p in folder.glob("*.json")) - t0_wall


def parse_workloads(text: str) -> list[tuple[int, float]]:
    try:
        return [(int(t), float(w)) for t, w in (item.split("x") for item in text.split(","))]
    except ValueError:
        raise SystemExit(f"--workloads: expected TRIALSxSECONDS,... (e.g. 16x3,64x1), got {text!r}") from None


def median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument(
        "--workloads", default="16x3,64x1,200x0", help="TRIALSxSECONDS per trial, comma-separated"
    )
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds of each path per workload")
    parser.add_argument("--port", type=int, default=8193)
    parser.add_argument("--ray-venv", type=Path, default=REPO / "build" / "ray-venv")
    args = parser.parse_args()
    workloads = parse_workloads(args.workloads)
    python = ensure_ray_venv(args.ray_venv.absolute())

    base = Path(tempfile.mkdtemp(prefix="det-bench-ray-"))
    base.chmod(0o755)  # trials running as their own user reach their times folder through it
    dags, work = base / "dags", base / "work"
    dags.mkdir()
    work.mkdir()
    driver = base / "ray_driver.py"
    driver.write_text(RAY_DRIVER)
    shutil.copy(REPO / "dags" / "det_experiments.py", dags)
    # One plain DAG per workload, each mapping over its own count of trials.
    for trials, _ in workloads:
        (dags / f"plain_bench_{trials}.py").write_text(
            orchestration.plain_dag_source(work, base / "plain-stores", trials, f"plain_bench_{trials}")
        )
    (work / "train.py").write_text(orchestration.WORK_SCRIPT)

    setup = argparse.Namespace(executor="local", pg_url=None, port=args.port, slots=args.slots, workers=1)
    af = orchestration.configure_airflow(setup, base, dags)
    results: dict[tuple[int, float], list[Path_]] = {}
    try:
        client = orchestration.start_airflow(af, args.slots)
        for trials, _ in workloads:
            orchestration.wait_for(
                lambda t=trials: client.get(f"/api/v2/dags/plain_bench_{t}").status_code == 200,
                120,
                "plain DAG",
            )
        # Warm up every path once (first task processes, imports, caches; Ray's worker start).
        warm = argparse.Namespace(trials=args.slots)
        orchestration.run_det(client, work, warm, 0.1, base / "warm-det")
        run_ray(python, driver, base, args.slots, args.slots, 0.1, True)
        for w, (trials, seconds) in enumerate(workloads):
            paths = [
                Path_("det-airflow"),
                Path_("plain Airflow"),
                Path_("Ray Tune, reuse_actors"),
                Path_("Ray Tune, new actors"),
            ]
            job = argparse.Namespace(trials=trials)
            for r in range(args.repeat):
                times = base / f"det-{w}-{r}"
                wall, t0_wall, _ = orchestration.run_det(client, work, job, seconds, times)
                paths[0].rounds.append(
                    Round(wall, orchestration.training_times(times), first_code(times, t0_wall))
                )
                times = base / f"plain-{w}-{r}"
                wall, t0_wall, _ = orchestration.run_plain(client, seconds, times, f"plain_bench_{trials}")
                paths[1].rounds.append(
                    Round(wall, orchestration.training_times(times), first_code(times, t0_wall))
                )
                paths[2].rounds.append(run_ray(python, driver, base, trials, args.slots, seconds, True))
                paths[3].rounds.append(run_ray(python, driver, base, trials, args.slots, seconds, False))
                for p in paths:
                    if len(p.rounds[-1].work) != trials:
                        raise RuntimeError(
                            f"{p.name}: expected {trials} timings, got {len(p.rounds[-1].work)}"
                        )
            results[(trials, seconds)] = paths
    finally:
        af.stop()

    print(f"{args.slots} slots, {args.repeat} rounds per path, alternating; medians (min–max)")
    for (trials, seconds), paths in results.items():
        print(f"\n{trials} trials × {seconds:g} s")
        reference = statistics.median(paths[2].overheads(args.slots, trials))
        for p in paths:
            overheads = p.overheads(args.slots, trials)
            ratio = statistics.median(overheads) / reference if reference > 0 else float("nan")
            firsts = [r.first_code for r in p.rounds if r.first_code is not None]
            reports = [r.first_report for r in p.rounds if r.first_report is not None]
            line = f"  {p.name:<24} overhead/trial {median_range(overheads)}  {ratio:5.2f}x Ray Tune (reuse)"
            line += f"  wall {median_range([r.wall for r in p.rounds])}"
            if firsts:
                line += f"  first code {median_range(firsts)}"
            if reports:
                line += f"  first report {median_range(reports)}"
            print(line)
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
