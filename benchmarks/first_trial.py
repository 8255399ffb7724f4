"""Submit → first trial running, on an idle local Airflow, against trigger → first task of a plain DAG.

The same setup as `orchestration_overhead.py` (its helpers are reused: the quickstart's local
Airflow, a 4-slot pool, the same training script): a one-trial det experiment is posted as
`det experiment create` posts it, and the already-parsed plain mapped-task DAG is triggered with
one task. Each round measures, from the submission (or trigger):

- task start: the Airflow start_date of the first `trial` (or `train`) task instance;
- code start: when the training script's first line after `import det_airflow` ran.

Rounds alternate det and plain after one warm-up of each; medians and the spread (min–max) are
printed, with the hops of det's first round for where the time goes.

    .venv/bin/python benchmarks/first_trial.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from orchestration_overhead import PLAIN_DAG, WORK_SCRIPT, print_timeline, run_det, run_plain, wait_for  # noqa: E402

from det_airflow.localairflow import sqlite_url, write_config  # noqa: E402


def first_task_start(client: httpx.Client, dag_id: str, run_id: str, task_id: str) -> float:
    tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100").json()[
        "task_instances"
    ]
    starts = [datetime.fromisoformat(t["start_date"]).timestamp() for t in tis if t["task_id"] == task_id]
    if not starts:
        raise RuntimeError(f"no {task_id} task instance started in {dag_id} run {run_id}")
    return min(starts)


def first_code_start(folder: Path) -> float:
    return min(json.loads(p.read_text())["start"] for p in folder.glob("*.json"))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f} s ({min(values):.2f}–{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds (det, then plain, each)")
    parser.add_argument("--work", type=float, default=0.5, help="training seconds of the trial")
    parser.add_argument("--pg-url", help="PostgreSQL URL for Airflow's database (default SQLite)")
    parser.add_argument("--port", type=int, default=8192)
    parser.add_argument(
        "--docker",
        action="store_true",
        help="also run the det trial in a container (make trial-image) each round, against the local process",
    )
    args = parser.parse_args()
    args.trials = 1  # read by run_det

    base = Path(tempfile.mkdtemp(prefix="det-first-"))
    base.chmod(0o755)  # trials running as their own user reach their times folder through it
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
        extra={"det": {"trial_work_dir": str(base / "trials")}},
    )
    det_task, det_code, plain_task, plain_code = [], [], [], []
    docker_task: list[float] = []
    docker_code: list[float] = []
    try:
        af.migrate()
        subprocess.run(
            [str(Path(sys.executable).parent / "det"), "admin", "migrate"], env=af.env(), check=True
        )
        af.airflow("pools", "set", "bench", "4", "benchmark pool")
        af.start()
        af.wait_ready()
        client = af.client(timeout=60)
        wait_for(lambda: client.get("/api/v2/dags/plain_bench").status_code == 200, 120, "the plain DAG")
        run_det(client, work, args, 0.1, base / "warm-det")
        run_plain(client, 0.1, base / "warm-plain")
        if args.docker:
            run_det(client, work, args, 0.1, base / "warm-docker", runner="docker")
        for r in range(args.repeat):
            times = base / f"det-{r}"
            _, t0, eid = run_det(client, work, args, args.work, times)
            exp = client.get(f"/det/api/v1/experiments/{eid}").json()["experiment"]
            det_task.append(first_task_start(client, exp["dag_id"], exp["dag_run_id"], "trial") - t0)
            det_code.append(first_code_start(times) - t0)
            if r == 0:
                print_timeline(client, exp["dag_id"], exp["dag_run_id"], t0)
            if args.docker:
                times = base / f"docker-{r}"
                _, t0, eid = run_det(client, work, args, args.work, times, runner="docker")
                exp = client.get(f"/det/api/v1/experiments/{eid}").json()["experiment"]
                docker_task.append(first_task_start(client, exp["dag_id"], exp["dag_run_id"], "trial") - t0)
                docker_code.append(first_code_start(times) - t0)
            times = base / f"plain-{r}"
            _, t0, run_id = run_plain(client, args.work, times)
            plain_task.append(first_task_start(client, "plain_bench", run_id, "train") - t0)
            plain_code.append(first_code_start(times) - t0)
            print(
                f"round {r + 1}: det task {det_task[-1]:.2f} s, code {det_code[-1]:.2f} s |"
                f" plain task {plain_task[-1]:.2f} s, code {plain_code[-1]:.2f} s"
            )
    finally:
        af.stop()

    print(f"\n{args.repeat} rounds, median (min–max), from submission / trigger")
    print(f"det:   first trial task start {spread(det_task)}, its code running {spread(det_code)}")
    print(f"plain: first task start       {spread(plain_task)}, its code running {spread(plain_code)}")
    if args.docker:
        print(
            f"det in Docker: first trial task start {spread(docker_task)}, its code running {spread(docker_code)}"
        )
        extra = [d - c for d, c in zip(docker_code, det_code, strict=True)]
        print(f"Docker extra, submit to code running (per round): {spread(extra)}")
    print(
        f"ratio det/plain, code running (medians): {statistics.median(det_code) / statistics.median(plain_code):.2f}x"
    )
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
