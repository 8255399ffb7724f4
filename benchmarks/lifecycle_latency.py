"""Pause, activate and preemption latencies, against Airflow's own task start latency in the same run.

On one freshly started local Airflow (the quickstart's setup, as `first_trial.py`; `[det]
preemption = true`), each round measures:

- plain task start (the baseline): trigger of the already-parsed plain DAG → its task's start_date;
  and, as the det figures run to a trial's code, also → its code running (its first line after
  `import det_airflow`, as the trial scripts stamp theirs);
- pause → pool slots free: `POST /experiments/{id}/pause` on a one-trial experiment whose Core API
  script is training → the experiment's Airflow pool shows no occupied or running slot (the paused
  trial checkpoints and exits; its task defers, holding no pool slot);
- activate → training resumed: `POST /experiments/{id}/activate` → the trial script's first line
  after `import det_airflow` runs again; once 1 s after the trial paused, and once after a pause
  longer than the paused task's trigger waits before its first check (`MIN_WAIT_SECONDS`). Either
  way the activation starts the paused slot in a new try of its task, without its trigger;
- preemption → higher-priority trial running: in a 1-slot pool whose priority-90 trial is training,
  `POST /experiments` of a priority-10 experiment → its trial script's first line runs (and the
  part of it after the priority-90 trial's script exited). Its reference: the same submission into
  a free 1-slot pool, nothing to preempt (the new experiment's DAG and run are started either way).

Experiments are posted as `det experiment create` posts them. The script asks `should_preempt()`
every 0.1 s; the Core API answers from its preemption watcher, a long poll the master answers within
a quarter of a second of the pause or preemption (each round pauses or preempts at a random point of
the script's loop). Medians, min–max and the ratios to the plain task start
median are printed, with the load average (other work on the machine inflates every figure).

    .venv/bin/python benchmarks/lifecycle_latency.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from first_trial import first_code_start, first_task_start, spread  # noqa: E402
from orchestration_overhead import PLAIN_DAG, WORK_SCRIPT, run_det, run_plain, wait_for  # noqa: E402

from det_airflow.context_archive import pack_context  # noqa: E402
from det_airflow.localairflow import sqlite_url, write_config  # noqa: E402
from det_airflow.operators.triggers import MIN_WAIT_SECONDS  # noqa: E402

PAUSE_POOL = "lifecycle_pause"
PREEMPT_POOL = "lifecycle_preempt"
FREE_POOL = "lifecycle_free"
TARGET = 2.0  # each latency ≤ 2× Airflow's own task start latency

# Trains until its release file exists, resuming from its checkpoint; checkpoints and exits 0 when
# asked to (pause or preemption). Appends when its code starts, and when it leaves, to BENCH_TIMES.
LIFECYCLE_SCRIPT = """
import os, time
import det_airflow as det

started = time.time()
times = os.environ["BENCH_TIMES"]
with open(os.path.join(times, "starts"), "a") as f:
    f.write(f"{started}\\n")
release = os.environ["RELEASE_FILE"]
info = det.get_cluster_info()
steps = 0
with det.core.init() as core_context:
    if info.latest_checkpoint:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = int((path / "steps").read_text())
    while not os.path.exists(release):
        steps += 1
        if steps % 10 == 0:
            core_context.train.report_training_metrics(steps, {"loss": 1.0 / steps})
        if core_context.preempt.should_preempt():
            with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (path / "steps").write_text(str(steps))
            with open(os.path.join(times, "exits"), "a") as f:
                f.write(f"{time.time()}\\n")
            raise SystemExit(0)
        time.sleep(0.1)
    core_context.train.report_validation_metrics(steps, {"loss": 1.0 / max(steps, 1)})
"""


class Lifecycle:
    """One-trial experiments running LIFECYCLE_SCRIPT, each with its own times folder and release file."""

    def __init__(self, client: httpx.Client, base: Path) -> None:
        self.client = client
        self.base = base
        self.context = base / "lifecycle"
        self.context.mkdir()
        (self.context / "train.py").write_text(LIFECYCLE_SCRIPT)
        self.archive = base64.b64encode(pack_context(self.context).data).decode()

    def folder(self, label: str) -> Path:
        folder = self.base / label
        folder.mkdir()
        folder.chmod(0o777)  # trials may run as their own user (docs/trial-isolation.md)
        return folder

    def submit(self, label: str, *, pool: str, priority: int, released: bool = False) -> tuple[float, int]:
        """Post the experiment as `det experiment create` does. Returns the submission time and its id.

        A released experiment's trial ends as soon as its code has started."""
        folder = self.folder(label)
        if released:
            self.release(label)
        config = (
            f"name: lifecycle-{label}\nentrypoint: python3 train.py\n"
            "searcher: {name: random, metric: loss, max_trials: 1, max_concurrent_trials: 0}\n"
            f"resources: {{resource_pool: {pool}, priority: {priority}}}\nmax_restarts: 0\n"
            "environment: {environment_variables: "
            f"[BENCH_TIMES={folder}, RELEASE_FILE={folder / 'release'}]}}\n"
        )
        t0 = time.time()
        created = self.client.post(
            "/det/api/v1/experiments", json={"config": config, "context": self.archive}
        )
        created.raise_for_status()
        return t0, created.json()["experiment"]["id"]

    def stamps(self, label: str, kind: str) -> list[float]:
        path = self.base / label / kind
        return [float(line) for line in path.read_text().split()] if path.exists() else []

    def wait_started(self, label: str, count: int, timeout: float = 300) -> float:
        """When the script's code started for the count-th time."""

        def started() -> float | None:
            starts = self.stamps(label, "starts")
            return starts[count - 1] if len(starts) >= count else None

        return wait_for(started, timeout, f"{label}'s code starting (run {count})")

    def release(self, label: str) -> None:
        (self.base / label / "release").write_text("go")
        (self.base / label / "release").chmod(0o644)

    def post(self, eid: int, action: str) -> float:
        t0 = time.time()
        self.client.post(f"/det/api/v1/experiments/{eid}/{action}").raise_for_status()
        return t0

    def wait_trial(self, eid: int, state: str) -> None:
        def reached() -> bool:
            trials = self.client.get(f"/det/api/v1/experiments/{eid}/trials").json()["trials"]
            return bool(trials) and trials[0]["state"] == state

        wait_for(reached, 300, f"experiment {eid}'s trial {state}")

    def wait_completed(self, eid: int) -> None:
        def ended() -> str | None:
            state = self.client.get(f"/det/api/v1/experiments/{eid}").json()["experiment"]["state"]
            return state if state in ("COMPLETED", "ERROR", "CANCELED") else None

        if (state := wait_for(ended, 300, f"experiment {eid}")) != "COMPLETED":
            raise RuntimeError(f"experiment {eid} ended {state}")

    def pool_free(self, pool: str) -> float | None:
        """The time the pool showed no occupied or running slot, or None while it does."""
        p = self.client.get(f"/api/v2/pools/{pool}").json()
        return time.time() if p["occupied_slots"] == 0 and p["running_slots"] == 0 else None


def into_training() -> None:
    """Sleep into the training loop, at a random point of it (and of the master's quarter-second
    checks of the watcher's long poll): a fixed delay would always land at the same point."""
    time.sleep(random.uniform(1.0, 2.0))


def pause_and_activate(life: Lifecycle, r: int) -> tuple[float, float, float, float]:
    """Pause → pool free, activate → code running again (1 s after the trial paused, and again once
    its trigger has started polling). Returns those and pause → the script exited."""
    label = f"pause-{r}"
    _, eid = life.submit(label, pool=PAUSE_POOL, priority=42)
    life.wait_started(label, 1)
    life.wait_trial(eid, "RUNNING")
    into_training()
    t_pause = life.post(eid, "pause")
    t_free = wait_for(lambda: life.pool_free(PAUSE_POOL), 120, "the pause pool free", interval=0.05)
    (t_exit,) = life.stamps(label, "exits")
    life.wait_trial(eid, "PAUSED")
    time.sleep(1)
    t_activate = life.post(eid, "activate")
    t_resumed = life.wait_started(label, 2, timeout=120)
    # Paused for longer than the trigger's first wait, as a person pausing for a while would.
    life.wait_trial(eid, "RUNNING")
    time.sleep(1)
    life.post(eid, "pause")
    life.wait_trial(eid, "PAUSED")
    time.sleep(MIN_WAIT_SECONDS + 3)
    t_activate_settled = life.post(eid, "activate")
    t_resumed_settled = life.wait_started(label, 3, timeout=120)
    life.release(label)
    life.wait_completed(eid)
    return t_free - t_pause, t_resumed - t_activate, t_resumed_settled - t_activate_settled, t_exit - t_pause


def preempt(life: Lifecycle, r: int) -> tuple[float, float]:
    """Submit of a priority-10 experiment → its code running, in a pool a priority-90 trial fills.

    Returns that and the part after the priority-90 trial's script exited."""
    low, high = f"low-{r}", f"high-{r}"
    _, low_eid = life.submit(low, pool=PREEMPT_POOL, priority=90)
    life.wait_started(low, 1)
    life.wait_trial(low_eid, "RUNNING")
    into_training()
    t_submit, high_eid = life.submit(high, pool=PREEMPT_POOL, priority=10, released=True)
    t_high = life.wait_started(high, 1, timeout=120)
    (t_low_exit,) = life.stamps(low, "exits")
    life.release(low)
    life.wait_completed(high_eid)
    life.wait_completed(low_eid)
    return t_high - t_submit, t_high - t_low_exit


def submit_to_free_pool(life: Lifecycle, r: int) -> float:
    """Submit of a priority-10 experiment → its code running, in a free pool (nothing to preempt)."""
    label = f"free-{r}"
    t_submit, eid = life.submit(label, pool=FREE_POOL, priority=10, released=True)
    t_code = life.wait_started(label, 1, timeout=120)
    life.wait_completed(eid)
    return t_code - t_submit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds")
    parser.add_argument("--pg-url", help="PostgreSQL URL for Airflow's database (default SQLite)")
    parser.add_argument("--port", type=int, default=8193)
    args = parser.parse_args()
    print(f"load average at start (1, 5, 15 min): {os.getloadavg()}")

    base = Path(tempfile.mkdtemp(prefix="det-lifecycle-"))
    base.chmod(0o755)  # trials running as their own user reach their folders through it
    dags, work = base / "dags", base / "work"
    dags.mkdir()
    work.mkdir()
    shutil.copy(REPO / "dags" / "det_experiments.py", dags)
    (dags / "plain_bench.py").write_text(f"WORK = {str(work)!r}\nTRIALS = 1\n" + PLAIN_DAG)
    (work / "train.py").write_text(WORK_SCRIPT)
    af = write_config(
        base / "home",
        sql_alchemy_conn=args.pg_url or sqlite_url(base / "home"),
        dags_folder=dags,
        port=args.port,
        extra={"det": {"trial_work_dir": str(base / "trials"), "preemption": "true"}},
    )
    plain, plain_code, paused, resumed, settled, pause_exit = [], [], [], [], [], []
    preempted, after_exit, free = [], [], []
    try:
        af.migrate()
        subprocess.run(
            [str(Path(sys.executable).parent / "det"), "admin", "migrate"], env=af.env(), check=True
        )
        af.airflow("pools", "set", "bench", "4", "benchmark pool")
        af.airflow("pools", "set", PAUSE_POOL, "1", "pause / activate")
        af.airflow("pools", "set", PREEMPT_POOL, "1", "preemption")
        af.airflow("pools", "set", FREE_POOL, "1", "submission, nothing to preempt")
        af.start()
        af.wait_ready()
        client = af.client(timeout=60)
        wait_for(lambda: client.get("/api/v2/dags/plain_bench").status_code == 200, 120, "the plain DAG")
        run_det(client, work, argparse.Namespace(trials=1), 0.1, base / "warm-det")
        run_plain(client, 0.1, base / "warm-plain")
        life = Lifecycle(client, base)
        for r in range(args.repeat):
            _, t0, run_id = run_plain(client, 0.1, base / f"plain-{r}")
            plain.append(first_task_start(client, "plain_bench", run_id, "train") - t0)
            plain_code.append(first_code_start(base / f"plain-{r}") - t0)
            pause, activate, activate_settled, exited = pause_and_activate(life, r)
            paused.append(pause)
            resumed.append(activate)
            settled.append(activate_settled)
            pause_exit.append(exited)
            total, after = preempt(life, r)
            preempted.append(total)
            after_exit.append(after)
            free.append(submit_to_free_pool(life, r))
            print(
                f"round {r + 1}: plain task start {plain[-1]:.2f} s, code {plain_code[-1]:.2f} s |"
                f" pause → pool free {pause:.2f} s"
                f" (script exited at {exited:.2f} s) | activate → code {activate:.2f} s"
                f" (after a long pause {activate_settled:.2f} s) |"
                f" preemption → code {total:.2f} s ({after:.2f} s after the low trial's exit;"
                f" {free[-1]:.2f} s into a free pool)"
            )
    finally:
        af.stop()

    baseline, baseline_code = statistics.median(plain), statistics.median(plain_code)
    print(
        f"\n{args.repeat} rounds, median (min–max); ratios = median / plain task start median, "
        "and / plain code running median"
    )
    print(f"{'plain Airflow: trigger → task start':<40}{spread(plain)}")
    print(f"{'plain Airflow: trigger → code running':<40}{spread(plain_code)}")
    for name, values in (
        ("pause → pool slots free", paused),
        ("activate → training resumed", resumed),
        (f"  the same, paused {MIN_WAIT_SECONDS + 3:.0f} s first", settled),
        ("preemption → priority-10 code running", preempted),
    ):
        ratio, ratio_code = statistics.median(values) / baseline, statistics.median(values) / baseline_code
        verdicts = ", ".join("met" if r <= TARGET else "NOT met" for r in (ratio, ratio_code))
        print(
            f"{name:<40}{spread(values)}  {ratio:.2f}x, {ratio_code:.2f}x  (target ≤ {TARGET:.0f}x: {verdicts})"
        )
    print(f"{'  of which pause → the script exited':<40}{spread(pause_exit)}")
    print(f"{'  of which low exited → high code runs':<40}{spread(after_exit)}")
    ratio_free = statistics.median(preempted) / statistics.median(free)
    print(f"{'  the same into a free pool':<40}{spread(free)}  (preemption: {ratio_free:.2f}x it)")
    print(f"load average at end (1, 5, 15 min): {os.getloadavg()}")
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
