"""Placement across hosts: 60 mixed trials on a CeleryExecutor Airflow whose workers are det hosts.

Two set-ups in this one run, each a fresh local Airflow on the CeleryExecutor (its own PostgreSQL,
Redis, Celery workers: ``det_airflow.localairflow``'s Celery mode) with one 8-slot pool:

- **2 hosts**: two Celery workers of 4 CPU slots each, so a trial's gang must fit one host;
- **1 host**: one Celery worker of 8 slots (the baseline: no fragmentation across hosts).

Each runs three experiments submitted at once, 20 trials each of 1, 2 and 4 slots, every trial
``--work`` seconds of training. While they run, the master's host view (`GET /agents`) and job
queue (`GET /jobs`) are sampled every 0.25 s. Reported per set-up:

- slot utilisation while trials wait: the mean share of the 8 slots the hosts' trials hold (admitted
  and starting or running) over the samples where some trial waits to be admitted (created by its
  searcher, not yet given slots), from the first admission on (before it the experiments' DAGs are
  being published);
- utilisation while a job is short of slots: the earlier measure, over the samples where a job of
  the queue needs more slots than it holds (`GET /jobs`), which also counts a job between trials;
- idle while a waiting gang fits: the mean share of the 8 slots left free in the samples where some
  waiting trial's gang would fit a host as it is (the rest of the idle share is slots too few on any
  one host for the gangs that wait);
- double leases: samples where a host holds more slots than it reported, and, from the trials'
  own records afterwards, the most slots any host's overlapping runs ever held against its slots;
- running while trials wait, from the trials' records afterwards: the share of the 8 slots held by
  runs that have started (STARTING on), while some trial waits for its first run; stricter than the
  sampled utilisation, which counts a slot from its trial's admission;
- trials split across hosts: trials whose runs name more than one host (single-node gangs);
- trials per minute, submission to the last experiment COMPLETED.

    .venv/bin/python benchmarks/hosts_utilisation.py [--trials-per-size 20] [--work 3]
"""

from __future__ import annotations

import argparse
import base64
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from det_airflow.context_archive import pack_context  # noqa: E402
from det_airflow.localairflow import LocalAirflow, init_celery, write_config  # noqa: E402

POOL_SLOTS = 8
SIZES = (1, 2, 4)
TRAIN = """
import os, time
import det_airflow as det

work = float(os.environ["BENCH_WORK"])
with det.core.init() as core:
    for step in range(1, 4):
        time.sleep(work / 3)
        core.train.report_training_metrics(step, {"loss": 1.0 / step})
"""


@dataclass
class Samples:
    """What the sampler saw: (held slots, a trial waiting, idle slots a waiting gang would fit, a job
    short of slots) per look, and looks where a host was over-leased."""

    held: list[tuple[int, bool, int, bool]] = field(default_factory=list)
    over_leased: int = 0


@contextmanager
def celery_airflow(base: Path, workers: int, host_slots: int, port: int) -> Iterator[LocalAirflow]:
    home = base / "home"
    layout, url, _ = init_celery(home, workers=workers, host_slots=host_slots, sql_alchemy_conn=None)
    dags = base / "dags"
    dags.mkdir(parents=True)
    shutil.copy(REPO / "dags" / "det_experiments.py", dags)
    af = write_config(home, sql_alchemy_conn=url, dags_folder=dags, port=port, celery=layout)
    try:
        af.migrate()
        det = str(Path(sys.executable).parent / "det")
        subprocess.run([det, "admin", "migrate"], env=af.env(), check=True, capture_output=True)
        af.airflow("pools", "set", "bench", str(POOL_SLOTS), "benchmark pool")
        af.start()
        af.wait_ready(300)
        yield af
    finally:
        af.stop()


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")


def _sample(client: httpx.Client, stop: threading.Event, samples: Samples, sizes: dict[int, int]) -> None:
    """Every 0.25 s: the slots the hosts hold, and the gangs of the trials still waiting to be
    admitted (``sizes``: experiment id -> slots per trial, filled in as they are submitted)."""
    while not stop.is_set():
        agents = client.get("/det/api/v1/agents").json()["agents"]
        alive = [a for a in agents if a["alive"]]
        held = sum(a["used_slots"] for a in alive)
        gangs = [
            size
            for experiment_id, size in list(sizes.items())
            for trial in client.get(f"/det/api/v1/experiments/{experiment_id}/trials").json()["trials"]
            if trial["state"] == "QUEUED" and trial["host"] is None  # created, not admitted yet
        ]
        free = [a["num_slots"] - a["used_slots"] for a in alive]
        # Idle slots while some waiting trial's gang would fit a host as it is: time the admission
        # takes (or a job ahead holding it back), not slots too few on any one host for the gangs.
        fitting = sum(free) if gangs and free and min(gangs) <= max(free) else 0
        # The earlier measure: a job of the queue short of slots (`det job list`), which also counts
        # a job between its trials (none created yet) or whose last trial has just ended.
        jobs = client.get("/det/api/v1/jobs").json()["jobs"]
        short = any(j["needed_slots"] > j["acquired_slots"] for j in jobs)
        samples.over_leased += sum(1 for a in agents if a["used_slots"] > a["num_slots"])
        samples.held.append((held, bool(gangs), fitting, short))
        stop.wait(0.25)


def _submit(client: httpx.Client, context: str, slots: int, trials: int, work: float) -> int:
    config = (
        f"name: mixed-{slots}\nentrypoint: python3 train.py\n"
        f"hyperparameters: {{x: {{type: int, minval: 0, maxval: 1000}}}}\n"
        f"searcher: {{name: random, metric: loss, max_trials: {trials}, "
        f"max_concurrent_trials: {POOL_SLOTS // slots}, max_length: {{batches: 3}}}}\n"
        f"resources: {{resource_pool: bench, slots_per_trial: {slots}}}\nmax_restarts: 0\n"
        f"environment: {{environment_variables: [BENCH_WORK={work}]}}\n"
    )
    created = client.post("/det/api/v1/experiments", json={"config": config, "context": context})
    created.raise_for_status()
    return int(created.json()["experiment"]["id"])


def _runs(client: httpx.Client, trial_id: int) -> tuple[float, list[tuple[float, float]]]:
    """When the trial was created, and its runs: (start, end) from STARTING to the run's end."""
    changes = client.get(f"/det/api/v1/trials/{trial_id}/state-changes").json()["state_changes"]
    created = datetime.fromisoformat(changes[0]["time"]).timestamp()
    runs, started = [], None
    for change in changes:
        at = datetime.fromisoformat(change["time"]).timestamp()
        if change["to"] == "STARTING":
            started = at
        elif started is not None and change["to"] not in ("PULLING", "STARTING", "RUNNING"):
            runs.append((started, at))
            started = None
    return created, runs


def _running_while_waiting(trials: list[tuple[int, float, list[tuple[float, float]]]]) -> float:
    """From the trials' own records, (gang, created, runs) each: the mean share of the pool's slots
    that started runs hold, on a 10 ms grid over the times some trial waits for its first run
    (created, not started), from the first run's start on. Stricter than the sampled view: a slot
    whose trial is admitted but whose process has not started yet counts as idle."""
    first = min(runs[0][0] for _, _, runs in trials if runs)
    last = max(runs[-1][1] for _, _, runs in trials if runs)
    step, held, looks = 0.01, 0, 0
    for i in range(int((last - first) / step)):
        t = first + i * step
        if not any(created <= t < runs[0][0] for _, created, runs in trials if runs):
            continue
        looks += 1
        held += sum(gang for gang, _, runs in trials for start, end in runs if start <= t < end)
    return held / looks / POOL_SLOTS if looks else float("nan")


def _peak_per_host(trials: list[tuple[str, int, list[tuple[float, float]]]]) -> dict[str, int]:
    """The most slots any host's overlapping runs held at once, from the trials' records."""
    events: dict[str, list[tuple[float, int]]] = {}
    for host, gang, runs in trials:
        for start, end in runs:
            events.setdefault(host, []).extend([(start, gang), (end, -gang)])
    peaks = {}
    for host, points in events.items():
        level = peak = 0
        for _, change in sorted(points, key=lambda p: (p[0], p[1])):  # ends before starts at a tie
            level += change
            peak = max(peak, level)
        peaks[host] = peak
    return peaks


def run(base: Path, workers: int, args: argparse.Namespace, port: int) -> dict[str, Any]:
    host_slots = POOL_SLOTS // workers
    with celery_airflow(base, workers, host_slots, port) as af:
        client = af.client(timeout=60)
        _wait(
            lambda: sum(a["alive"] for a in client.get("/det/api/v1/agents").json()["agents"]) == workers,
            120,
            "every worker host to report",
        )
        work = base / "work"
        work.mkdir()
        (work / "train.py").write_text(TRAIN)
        context = base64.b64encode(pack_context(work).data).decode()
        samples, stop = Samples(), threading.Event()
        sizes: dict[int, int] = {}
        sampler = threading.Thread(
            target=_sample, args=(af.client(timeout=60), stop, samples, sizes), daemon=True
        )
        t0 = time.monotonic()
        ids: list[int] = []
        for size in SIZES:
            ids.append(_submit(client, context, size, args.trials_per_size, args.work))
            sizes[ids[-1]] = size
        sampler.start()

        def finished() -> list[str] | None:
            states = [client.get(f"/det/api/v1/experiments/{i}").json()["experiment"]["state"] for i in ids]
            return states if all(s in ("COMPLETED", "ERROR", "CANCELED") for s in states) else None

        states = _wait(finished, 1800, "the experiments")
        wall = time.monotonic() - t0
        stop.set()
        sampler.join()
        if set(states) != {"COMPLETED"}:
            raise RuntimeError(f"experiments ended {states}")
        records, histories = [], []
        split = 0
        hosts = {a["id"]: a["num_slots"] for a in client.get("/det/api/v1/agents").json()["agents"]}
        for experiment_id, size in zip(ids, SIZES, strict=True):
            for trial in client.get(f"/det/api/v1/experiments/{experiment_id}/trials").json()["trials"]:
                split += len(trial["hosts"]) > 1
                created, runs = _runs(client, trial["id"])
                records.append((trial["host"], size, runs))
                histories.append((size, created, runs))
        peaks = _peak_per_host(records)
    # From the first admission on: before it, the experiments' DAGs are still being published.
    first = next((i for i, (held, *_) in enumerate(samples.held) if held), len(samples.held))
    waiting = [(held, fitting) for held, wait, fitting, _ in samples.held[first:] if wait]
    short = [held for held, _, _, job_short in samples.held[first:] if job_short]
    return {
        "job_short": statistics.mean(short) / POOL_SLOTS if short else float("nan"),
        "utilisation": statistics.mean(h for h, _ in waiting) / POOL_SLOTS if waiting else float("nan"),
        "idle_fitting": statistics.mean(f for _, f in waiting) / POOL_SLOTS if waiting else float("nan"),
        "running": _running_while_waiting(histories),
        "over_leased": samples.over_leased,
        "peak_over_slots": max(0, *(peaks[h] - hosts[h] for h in peaks)),
        "split": split,
        "trials": len(records),
        "per_minute": len(records) * 60 / wall,
        "wall": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials-per-size", type=int, default=20)
    parser.add_argument("--work", type=float, default=3.0, help="training seconds per trial")
    parser.add_argument("--port", type=int, default=8193)
    args = parser.parse_args()
    results = {}
    for label, workers in (("2 hosts × 4 slots", 2), ("1 host × 8 slots", 1)):
        base = Path(tempfile.mkdtemp(prefix="det-bench-hosts-"))
        base.chmod(0o755)  # trials run as their own user
        try:
            results[label] = run(base, workers, args, args.port)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    trials = args.trials_per_size * len(SIZES)
    print(f"{trials} trials ({args.trials_per_size} each of 1, 2, 4 slots), {args.work:.0f} s of work each\n")
    print("| set-up | utilisation while trials wait | idle while a waiting gang fits "
          "| utilisation while a job is short (earlier measure) | running while trials wait (records) "
          "| over-leased looks | peak over a host's slots | trials split | trials/min |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        print(
            f"| {label} | {r['utilisation']:.0%} | {r['idle_fitting']:.0%} | {r['job_short']:.0%} "
            f"| {r['running']:.0%} "
            f"| {r['over_leased']} | {r['peak_over_slots']} | {r['split']} | {r['per_minute']:.1f} |"
        )
    two, one = results["2 hosts × 4 slots"], results["1 host × 8 slots"]
    print(f"\ntrials per minute, 2 hosts against 1: {two['per_minute'] / one['per_minute']:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
