"""Orchestration overhead: a 16-trial det experiment against the same work as a plain mapped-task DAG.

Both run on the same freshly started local Airflow (the quickstart's setup: LocalExecutor, SQLite,
or PostgreSQL with --pg-url; with `--executor celery`, the CeleryExecutor with Redis, PostgreSQL of
the home's own unless --pg-url, and --workers Celery workers, each a det host offering slots/workers
slots), through the same 4-slot pool, and run the same training script: it
sleeps WORK seconds in small steps and reports metrics through the Core API (to the master for the
experiment; to the local store in the plain DAG). Per-trial overhead is the wall time each trial costs
beyond its training, amortized at the pool's concurrency:

    overhead per trial = wall × slots / trials − mean training time

The experiment's wall time runs from `POST /experiments` (as `det experiment create` sends it: the DAG
does not exist yet) to COMPLETED; the plain DAG's from its trigger (already parsed) to success.

    .venv/bin/python benchmarks/orchestration_overhead.py [--trials 16] [--slots 4] [--work 3] [--repeat 5]
        [--executor local|celery] [--workers 2]

`--work 0` measures trials per minute for trivial trials (the script still starts, reports and exits).
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from det_airflow.context_archive import pack_context  # noqa: E402
from det_airflow.localairflow import (  # noqa: E402
    EXECUTORS,
    LocalAirflow,
    init_celery,
    sqlite_url,
    write_config,
)

WORK_SCRIPT = """
import json, os, sys, time
import det_airflow as det

work = float(os.environ.get("BENCH_WORK", "3"))
steps = 10
start = time.time()
with det.core.init() as core:
    for step in range(1, steps + 1):
        time.sleep(work / steps)
        core.train.report_training_metrics(step, {"loss": 1.0 / step})
    core.train.report_validation_metrics(steps, {"loss": 0.1})
end = time.time()
out = os.environ["BENCH_TIMES"]
with open(os.path.join(out, f"{os.getpid()}-{start}.json"), "w") as f:
    json.dump({"start": start, "end": end}, f)
"""

PLAIN_DAG = """
import os, subprocess, sys
from datetime import datetime
from airflow.sdk import DAG, task

with DAG("plain_bench", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         is_paused_upon_creation=False):
    @task(pool="bench", pool_slots=1)
    def train(i: int, dag_run=None) -> None:
        env = dict(os.environ, DET_LOCAL_STORE=f"{STORES}/store-{i}", BENCH_WORK=dag_run.conf["work"],
                   BENCH_TIMES=dag_run.conf["times"])
        subprocess.run([sys.executable, "train.py"], cwd=WORK, env=env, check=True)

    train.expand(i=list(range(TRIALS)))
"""


def plain_dag_source(work: Path, stores: Path, trials: int, dag_id: str = "plain_bench") -> str:
    """The plain DAG's file: ``trials`` mapped tasks running ``work``/train.py, each with its local
    store under ``stores``, outside ``work``: det sends ``work`` as the experiment's context, which
    must not grow with the plain runs' metrics and TensorBoard files."""
    header = f"WORK = {str(work)!r}\nSTORES = {str(stores)!r}\nTRIALS = {trials}\n"
    return header + PLAIN_DAG.replace('"plain_bench"', json.dumps(dag_id))


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def print_timeline(client: httpx.Client, dag_id: str, run_id: str, t0: float) -> None:
    from datetime import datetime

    tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100").json()[
        "task_instances"
    ]

    def stamps(ti: dict) -> str:  # type: ignore[type-arg]
        return " ".join(
            f"{datetime.fromisoformat(ti[k]).timestamp() - t0:6.1f}" if ti.get(k) else "     -"
            for k in ("queued_when", "start_date", "end_date")
        )

    print(f"--- {dag_id} (seconds after submission: queued / start / end, each try with its queue)")
    for ti in sorted(tis, key=lambda t: t["start_date"] or ""):
        print(f"{ti['task_id']:>10}[{ti['map_index']:>2}] {stamps(ti)}  {ti['state']}")
        if ti["try_number"] > 1:  # an experiment's slot that moved to another host, say
            path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/{ti['map_index']}/tries"
            for earlier in client.get(path).json().get("task_instances", []):
                print(
                    f"{'':>14}try {earlier['try_number']} {stamps(earlier)}  {earlier['state']} {earlier['queue']}"
                )


def run_det(  # type: ignore[no-untyped-def]
    client: httpx.Client,
    work: Path,
    args: argparse.Namespace,
    seconds: float,
    times: Path,
    runner: str = "local",
):
    """Submit the experiment as `det experiment create` does; wait for COMPLETED. Returns wall, t0, eid."""
    times.mkdir()
    times.chmod(0o777)  # trials may run as their own user (docs/trial-isolation.md)
    config = (
        "name: bench\nentrypoint: python3 train.py\n"
        f"searcher: {{name: random, metric: loss, max_trials: {args.trials}, max_concurrent_trials: 0}}\n"
        f"resources: {{resource_pool: bench}}\nmax_restarts: 0\n"
        f"environment: {{environment_variables: [BENCH_WORK={seconds}, BENCH_TIMES={times}]}}\n"
    )
    if runner != "local":
        # The container writes its times where the host reads them.
        config += f"airflow: {{trial_runner: {runner}}}\nbind_mounts: [{{host_path: {times}, container_path: {times}}}]\n"
    context = base64.b64encode(pack_context(work).data).decode()
    t0, t0_wall = time.monotonic(), time.time()
    created = client.post("/det/api/v1/experiments", json={"config": config, "context": context})
    created.raise_for_status()
    eid = created.json()["experiment"]["id"]

    def done() -> str | None:
        state = client.get(f"/det/api/v1/experiments/{eid}").json()["experiment"]["state"]
        return state if state in ("COMPLETED", "ERROR", "CANCELED") else None

    state = wait_for(done, 900, "the experiment")
    wall = time.monotonic() - t0
    if state != "COMPLETED":
        raise RuntimeError(f"experiment ended {state}")
    return wall, t0_wall, eid


def run_plain(client: httpx.Client, seconds: float, times: Path, dag_id: str = "plain_bench"):  # type: ignore[no-untyped-def]
    """Trigger the plain mapped-task DAG (already parsed); wait for success. Returns wall, t0, run id."""
    times.mkdir()
    t0, t0_wall = time.monotonic(), time.time()
    for _ in range(5):  # on SQLite, Airflow's own trigger route may answer 500 for a locked database
        run = client.post(
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"logical_date": None, "conf": {"work": str(seconds), "times": str(times)}},
        )
        if run.status_code < 500:
            break
        time.sleep(0.2)
    run.raise_for_status()
    run_id = run.json()["dag_run_id"]

    def done() -> str | None:
        state = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
        return state if state in ("success", "failed") else None

    state = wait_for(done, 900, "the plain DAG run")
    wall = time.monotonic() - t0
    if state != "success":
        raise RuntimeError("plain DAG run failed")
    return wall, t0_wall, run_id


def configure_airflow(args: argparse.Namespace, base: Path, dags: Path) -> LocalAirflow:
    """Write the benchmark's airflow.cfg for the chosen executor. In Celery mode without --pg-url
    this starts the home's own PostgreSQL server, which `LocalAirflow.stop()` stops again."""
    home = base / "home"
    extra = {"det": {"trial_work_dir": str(base / "trials")}}
    if args.executor == "local":
        url = args.pg_url or sqlite_url(home)
        return write_config(home, sql_alchemy_conn=url, dags_folder=dags, port=args.port, extra=extra)
    layout, url, _ = init_celery(
        home, workers=args.workers, host_slots=args.slots // args.workers, sql_alchemy_conn=args.pg_url
    )
    try:
        return write_config(
            home, sql_alchemy_conn=url, dags_folder=dags, port=args.port, extra=extra, celery=layout
        )
    except BaseException:
        LocalAirflow(home=home, port=args.port, url="", dags_folder=dags, celery=layout).stop()
        raise


def start_airflow(af: LocalAirflow, slots: int) -> httpx.Client:
    """Migrate Airflow's and det's tables, make the benchmark's pool of ``slots``, start Airflow and
    answer a client of its API server once it is ready."""
    af.migrate()
    subprocess.run([str(Path(sys.executable).parent / "det"), "admin", "migrate"], env=af.env(), check=True)
    af.airflow("pools", "set", "bench", str(slots), "benchmark pool")
    af.start()
    af.wait_ready(timeout=300)
    return af.client(timeout=60)


def wait_for_hosts(af: LocalAirflow, client: httpx.Client) -> None:
    """In Celery mode, wait until every worker's heartbeat shows its host alive: admission places
    trials only on live hosts."""
    if af.celery is None:
        return
    expected = {w.host_id for w in af.celery.workers}

    def alive() -> bool:
        agents = client.get("/det/api/v1/agents").json()["agents"]
        return {a["id"] for a in agents if a["alive"]} >= expected

    wait_for(alive, 120, f"hosts {', '.join(sorted(expected))} to report", interval=1)


def executor_heading(args: argparse.Namespace) -> str:
    if args.executor == "local":
        return EXECUTORS["local"]
    return f"{EXECUTORS['celery']} ({args.workers} workers × {args.slots // args.workers} slots)"


def training_times(folder: Path) -> list[float]:
    times = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    return [t["end"] - t["start"] for t in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--work", type=float, default=3.0, help="training seconds per trial")
    parser.add_argument(
        "--pg-url",
        help="PostgreSQL URL for Airflow's database (default: SQLite; with celery, a PostgreSQL of the home's own)",
    )
    parser.add_argument("--executor", choices=sorted(EXECUTORS), default="local", help="Airflow executor")
    parser.add_argument(
        "--workers", type=int, default=2, help="Celery workers (det hosts), each with slots/workers slots"
    )
    parser.add_argument("--port", type=int, default=8191)
    parser.add_argument("--timeline", action="store_true", help="print when each task ran")
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds (det, then plain, each)")
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="skip the warm-up run of each path (long runs: --trials 1000 --work 0)",
    )
    args = parser.parse_args()
    if args.executor == "celery" and (args.workers < 1 or args.slots % args.workers):
        parser.error(f"--slots ({args.slots}) must be a multiple of --workers ({args.workers})")

    base = Path(tempfile.mkdtemp(prefix="det-bench-"))
    base.chmod(0o755)  # trials running as their own user reach their times folder through it
    dags, work = base / "dags", base / "work"
    dags.mkdir()
    work.mkdir()
    shutil.copy(REPO / "dags" / "det_experiments.py", dags)
    (dags / "plain_bench.py").write_text(plain_dag_source(work, base / "plain-stores", args.trials))
    (work / "train.py").write_text(WORK_SCRIPT)

    af = configure_airflow(args, base, dags)
    try:
        client = start_airflow(af, args.slots)
        wait_for(lambda: client.get("/api/v2/dags/plain_bench").status_code == 200, 120, "plain DAG")
        wait_for_hosts(af, client)
        # Warm up both paths once (first task processes, imports, caches), then measure.
        if args.warm_up:
            run_det(client, work, args, 0.1, base / "warm-det")
            run_plain(client, 0.1, base / "warm-plain")
        rounds = []
        for r in range(args.repeat):
            det_wall, det_t0, eid = run_det(client, work, args, args.work, base / f"times-det-{r}")
            plain_wall, plain_t0, run_id = run_plain(client, args.work, base / f"times-plain-{r}")
            if args.timeline:
                exp = client.get(f"/det/api/v1/experiments/{eid}").json()["experiment"]
                print_timeline(client, exp["dag_id"], exp["dag_run_id"], det_t0)
                print_timeline(client, "plain_bench", run_id, plain_t0)
            rounds.append(
                (
                    det_wall,
                    training_times(base / f"times-det-{r}"),
                    plain_wall,
                    training_times(base / f"times-plain-{r}"),
                )
            )
    finally:
        af.stop()

    print(
        f"{executor_heading(args)}: trials {args.trials}, pool slots {args.slots}, training {args.work:.1f} s per trial, {args.repeat} rounds"
    )
    print("round | det wall  train/trial  overhead/trial | plain wall  train/trial  overhead/trial | ratio")
    det_overheads, plain_overheads = [], []
    for r, (det_wall, det_work, plain_wall, plain_work) in enumerate(rounds, 1):
        if len(det_work) != args.trials or len(plain_work) != args.trials:
            raise RuntimeError(f"expected {args.trials} timings, got {len(det_work)} and {len(plain_work)}")
        det_over = det_wall * args.slots / args.trials - statistics.mean(det_work)
        plain_over = plain_wall * args.slots / args.trials - statistics.mean(plain_work)
        det_overheads.append(det_over)
        plain_overheads.append(plain_over)
        print(
            f"{r:5d} | {det_wall:7.1f} s  {statistics.mean(det_work):9.2f} s  {det_over:12.2f} s |"
            f" {plain_wall:8.1f} s  {statistics.mean(plain_work):9.2f} s  {plain_over:12.2f} s | {det_over / plain_over:.2f}x"
        )
    det_median, plain_median = statistics.median(det_overheads), statistics.median(plain_overheads)
    ratios = [d / p for d, p in zip(det_overheads, plain_overheads, strict=True)]
    print(
        f"overhead per trial, median (min-max): det {det_median:.2f} s "
        f"({min(det_overheads):.2f}-{max(det_overheads):.2f}), plain Airflow {plain_median:.2f} s "
        f"({min(plain_overheads):.2f}-{max(plain_overheads):.2f})"
    )
    print(
        f"ratio det/plain (medians): {det_median / plain_median:.2f}x; "
        f"single rounds {min(ratios):.2f}-{max(ratios):.2f}x"
    )
    det_rate = [args.trials * 60 / wall for wall, *_ in rounds]
    plain_rate = [args.trials * 60 / wall for _, _, wall, _ in rounds]
    print(
        f"trials per minute, median (min-max): det {statistics.median(det_rate):.0f} "
        f"({min(det_rate):.0f}-{max(det_rate):.0f}), plain Airflow {statistics.median(plain_rate):.0f} "
        f"({min(plain_rate):.0f}-{max(plain_rate):.0f})"
    )
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
