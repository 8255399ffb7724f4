"""Task start: how long a user waits for a notebook, a TensorBoard or a command, against Airflow's own
task start, on the same freshly started local Airflow.

The setup of `first_trial.py` (the quickstart's local Airflow: LocalExecutor, SQLite, the admin's
login), with a plain one-task DAG whose task returns at once. Each round times, from the request:

- plain: `POST /api/v2/dags/plain_task/dagRuns` (the DAG already parsed) to its task instance's
  start_date, and to the run's success;
- notebook (`det notebook start`): `POST /det/api/v1/tasks {"type": "notebook"}` to JupyterLab
  answering `GET /det/proxy/<id>/api/status` with 200;
- tensorboard (`det tensorboard start`): `POST /det/api/v1/tasks {"type": "tensorboard",
  "experiment_ids": [id]}` over a finished one-trial experiment that reported 10 training metrics, to
  the first scalars served through the proxy (a run with a tag in `data/plugin/scalars/tags`, then
  points from `data/plugin/scalars/scalars`);
- command (`det cmd run true`): `POST /det/api/v1/tasks {"type": "command", "command": ["true"]}` to
  TERMINATED (COMPLETED, exit 0).

For each task the start_date of its `trial` task instance in Airflow is also read, for where the
time goes. Every task is killed once measured, and has ended before the next one starts. After one
warm-up of each, rounds run them in turn; medians and spreads (min–max) are printed, with the ratio
of each wait to the plain run's trigger → success.

    .venv/bin/python benchmarks/task_start.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from first_trial import first_task_start  # noqa: E402
from orchestration_overhead import WORK_SCRIPT, run_det, wait_for  # noqa: E402

from det_airflow.localairflow import sqlite_url, write_config  # noqa: E402

PLAIN_DAG = """
from datetime import datetime
from airflow.sdk import DAG, task

with DAG("plain_task", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         is_paused_upon_creation=False):
    @task
    def noop() -> None:
        return None

    noop()
"""
# Seconds between two looks; small against the waits measured.
POLL_S = 0.1
# The longest wait for one task before the benchmark gives up.
TIMEOUT_S = 300.0
KINDS = ("notebook", "tensorboard", "command")


class BenchmarkError(Exception):
    """A task or run did not get where the benchmark waits for it."""


@dataclass
class Waits:
    """Seconds from the request to Airflow's task start and to the end of the wait, per round."""

    task_start: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)


def retry_locked(send: Callable[[], httpx.Response]) -> httpx.Response:
    """On SQLite, a route may answer 500 for a locked database; the request is sent again."""
    for _ in range(5):
        answer = send()
        if answer.status_code < 500:
            break
        time.sleep(0.2)
    answer.raise_for_status()
    return answer


def poll(check: Callable[[], bool], what: str) -> float:
    """Seconds (monotonic) at which ``check`` first held."""
    wait_for(check, TIMEOUT_S, what, interval=POLL_S)
    return time.monotonic()


def run_plain(client: httpx.Client) -> tuple[float, float]:
    """Trigger the plain DAG; seconds to its task's start and to the run's success."""
    t0, t0_wall = time.monotonic(), time.time()
    run = retry_locked(lambda: client.post("/api/v2/dags/plain_task/dagRuns", json={"logical_date": None}))
    run_id = run.json()["dag_run_id"]
    states: list[str] = []

    def ended() -> bool:
        states.append(client.get(f"/api/v2/dags/plain_task/dagRuns/{run_id}").json()["state"])
        return states[-1] in ("success", "failed")

    done = poll(ended, "the plain DAG run") - t0
    if states[-1] != "success":
        raise BenchmarkError(f"plain DAG run {run_id} ended {states[-1]}")
    return first_task_start(client, "plain_task", run_id, "noop") - t0_wall, done


def task_of(client: httpx.Client, task_id: int) -> dict[str, Any]:
    return dict(client.get(f"/det/api/v1/tasks/{task_id}").json()["task"])


def failure(client: httpx.Client, task_id: int, what: str) -> BenchmarkError:
    """The error for a task that ended or answered otherwise than expected, with its last log lines."""
    task = task_of(client, task_id)
    lines = []
    if task["trial_id"] is not None:
        logs = client.get(f"/det/api/v1/trials/{task['trial_id']}/logs", params={"tail": 20}).json()
        lines = [line["message"].rstrip() for line in logs["logs"]]
    return BenchmarkError(
        f"{task['type']} {task_id} {what}: state {task['state']}, end state {task['end_state']}, "
        f"exit code {task['exit_code']}" + "".join(f"\n  | {line}" for line in lines)
    )


def proxied(client: httpx.Client, task_id: int, path: str, **params: str) -> httpx.Response | None:
    """The task's server's answer through the proxy; None while the task is not serving yet."""
    answer = client.get(f"/det/proxy/{task_id}/{path}", params=params)
    if answer.status_code == 409 and "it ended" in answer.text:
        raise failure(client, task_id, "ended before it served")
    if answer.status_code in (401, 403, 404):
        raise BenchmarkError(
            f"GET /det/proxy/{task_id}/{path}: HTTP {answer.status_code} {answer.text[:300]}"
        )
    return answer if answer.status_code == 200 else None


def notebook_serves(client: httpx.Client, task_id: int) -> Callable[[], bool]:
    return lambda: proxied(client, task_id, "api/status") is not None


def tensorboard_serves(client: httpx.Client, task_id: int) -> Callable[[], bool]:
    def scalars() -> bool:
        tags = proxied(client, task_id, "data/plugin/scalars/tags")
        runs = {run: sorted(found) for run, found in (tags.json() if tags else {}).items() if found}
        if not runs:
            return False
        run, (tag, *_) = next(iter(sorted(runs.items())))
        points = proxied(client, task_id, "data/plugin/scalars/scalars", run=run, tag=tag)
        return bool(points and points.json())

    return scalars


def command_ends(client: httpx.Client, task_id: int) -> Callable[[], bool]:
    def ended() -> bool:
        task = task_of(client, task_id)
        if task["state"] != "TERMINATED":
            return False
        if task["end_state"] != "COMPLETED" or task["exit_code"] != 0:
            raise failure(client, task_id, "did not complete")
        return True

    return ended


WAITS = {"notebook": notebook_serves, "tensorboard": tensorboard_serves, "command": command_ends}


def run_task(client: httpx.Client, kind: str, experiment_id: int) -> tuple[float, float]:
    """Start a task of ``kind``; seconds to its trial task's start in Airflow and to the end of its
    wait. The task is killed, and has ended, on return."""
    body: dict[str, Any] = {"type": kind}
    if kind == "tensorboard":
        body["experiment_ids"] = [experiment_id]
    if kind == "command":
        body["command"] = ["true"]
    t0, t0_wall = time.monotonic(), time.time()
    created = client.post("/det/api/v1/tasks", json=body)
    if created.status_code != 200:
        raise BenchmarkError(
            f"POST /det/api/v1/tasks {body}: HTTP {created.status_code} {created.text[:300]}"
        )
    task_id = created.json()["task"]["id"]
    try:
        try:
            done = poll(WAITS[kind](client, task_id), f"{kind} {task_id}") - t0
        except TimeoutError:
            raise failure(client, task_id, f"was not done after {TIMEOUT_S:.0f} s") from None
        task = task_of(client, task_id)
        started = first_task_start(client, task["dag_id"], task["dag_run_id"], "trial") - t0_wall
    finally:
        retry_locked(lambda: client.post(f"/det/api/v1/tasks/{task_id}/kill"))
        wait_for(lambda: task_of(client, task_id)["state"] == "TERMINATED", 120, f"{kind} {task_id} to end")
    return started, done


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s ({min(values):.2f}–{max(values):.2f})"


def report(results: dict[str, Waits], rounds: int) -> None:
    baseline = statistics.median(results["plain"].done)
    labels = {
        "plain": "plain DAG, trigger",
        "notebook": "det notebook start",
        "tensorboard": "det tensorboard start",
        "command": "det cmd run true",
    }
    print(f"\n{rounds} rounds, median (min–max) seconds from the request; ratio to plain trigger → success")
    print(f"{'':<22} {'to Airflow task start':>24} {'to serving / done':>24} {'ratio':>7}")
    for kind, waits in results.items():
        print(
            f"{labels[kind]:<22} {spread(waits.task_start):>24} {spread(waits.done):>24}"
            f" {statistics.median(waits.done) / baseline:6.1f}x"
        )
    print("done: plain run success; notebook /api/status 200; first TensorBoard scalars; command TERMINATED")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds (each kind once per round)")
    parser.add_argument("--pg-url", help="PostgreSQL URL for Airflow's database (default SQLite)")
    parser.add_argument("--port", type=int, default=8194)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat: expected at least 1, got {args.repeat}")

    base = Path(tempfile.mkdtemp(prefix="det-tasks-"))
    base.chmod(0o755)  # trials running as their own user reach their times folder through it
    dags, work = base / "dags", base / "work"
    dags.mkdir()
    work.mkdir()
    shutil.copy(REPO / "dags" / "det_experiments.py", dags)
    (dags / "plain_task.py").write_text(PLAIN_DAG)
    (work / "train.py").write_text(WORK_SCRIPT)
    af = write_config(
        base / "home",
        sql_alchemy_conn=args.pg_url or sqlite_url(base / "home"),
        dags_folder=dags,
        port=args.port,
        extra={"det": {"trial_work_dir": str(base / "trials")}},
    )
    results = {kind: Waits() for kind in ("plain", *KINDS)}
    try:
        af.migrate()
        subprocess.run(
            [str(Path(sys.executable).parent / "det"), "admin", "migrate"], env=af.env(), check=True
        )
        af.airflow("pools", "set", "bench", "4", "benchmark pool")
        af.start()
        af.wait_ready()
        client = af.client(timeout=60)
        wait_for(lambda: client.get("/api/v2/dags/plain_task").status_code == 200, 120, "the plain DAG")
        # The TensorBoard's experiment: one trial, 10 training metrics; it also warms up det's path.
        _, _, experiment_id = run_det(client, work, argparse.Namespace(trials=1), 0.5, base / "source")
        run_plain(client)
        for kind in KINDS:
            run_task(client, kind, experiment_id)
        for r in range(args.repeat):
            started, done = run_plain(client)
            results["plain"].task_start.append(started)
            results["plain"].done.append(done)
            line = [f"plain {started:.2f}/{done:.2f} s"]
            for kind in KINDS:
                started, done = run_task(client, kind, experiment_id)
                results[kind].task_start.append(started)
                results[kind].done.append(done)
                line.append(f"{kind} {started:.2f}/{done:.2f} s")
            print(f"round {r + 1} (task start / done): " + ", ".join(line))
    except (BenchmarkError, TimeoutError) as e:
        print(f"task_start.py: {e}\nAirflow's home and logs are kept in {base / 'home'}", file=sys.stderr)
        return 1
    finally:
        af.stop()

    report(results, args.repeat)
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
