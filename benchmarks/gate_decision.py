"""Gate decision: the time the master's admission gate takes to answer one trial slot.

A pool of 64 slots holds 20 jobs (a mix of priorities and gang sizes) with 1,000 waiting trials
between them. Timed, each as the median of many repetitions in this one run:

- the pure decision (:func:`det_airflow.master.queue_policy.plan` over the pool's 20 jobs), against a
  trivial baseline over the same input (sorting the 20 jobs and summing what they hold);
- the decision as the master makes it on its tables (SQLite): the pool snapshot query plus the
  plan, against a trivial baseline query (reading the asking experiment's row by id, which the
  slot protocol does anyway).

    .venv/bin/python benchmarks/gate_decision.py [--trials 1000] [--jobs 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _timing import timed_ms  # noqa: E402
from sqlalchemy import create_engine, select  # noqa: E402

from det_airflow.master import queue, queue_policy, schema  # noqa: E402

CAPACITY = 64
TARGET_MS = 5.0


def _jobs(jobs: int, trials: int) -> list[queue_policy.Job]:
    per_job = trials // jobs
    return [
        queue_policy.Job(
            id=i + 1,
            priority=(10, 42, 42, 70)[i % 4],
            position=float(i + 1),
            slots_per_trial=(1, 2, 4, 8)[i % 4],
            held=(1, 2, 4, 8)[i % 4] if i < 6 else 0,
            waiting=per_job,
        )
        for i in range(jobs)
    ]


def _fill(conn, jobs: list[queue_policy.Job]) -> None:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    for job in jobs:
        conn.execute(
            schema.experiments.insert().values(
                id=job.id,
                name=f"job-{job.id}",
                owner="alice",
                labels=[],
                state="ACTIVE",
                config={"resources": {"slots_per_trial": job.slots_per_trial, "priority": job.priority}},
                config_yaml="",
                resource_pool="gpus",
                searcher_name="random",
                search_done=False,
                progress=0.0,
                start_time=now,
                archived=False,
            )
        )
        held_trials = job.held // job.slots_per_trial
        conn.execute(
            schema.trials.insert(),
            [
                {
                    "experiment_id": job.id,
                    "request_id": n,
                    "state": "RUNNING" if n < held_trials else "QUEUED",
                    "hparams": {},
                    "trial_seed": n,
                    "summary": {},
                    "run_id": 1 if n < held_trials else 0,
                }
                for n in range(held_trials + job.waiting)
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    jobs = _jobs(args.jobs, args.trials)

    pure = timed_ms(lambda: queue_policy.plan(CAPACITY, jobs).admits(jobs[-1].id), 5000)
    trivial = timed_ms(lambda: (sorted(jobs, key=queue_policy.order_key), sum(j.held for j in jobs)), 5000)

    with tempfile.TemporaryDirectory() as folder:
        engine = create_engine(f"sqlite:///{folder}/det.db")
        schema.metadata.create_all(engine)
        with engine.begin() as conn:
            _fill(conn, jobs)
        with engine.connect() as conn:
            snap = queue.snapshot(conn, "gpus", capacity=CAPACITY)
            waiting = sum(job.waiting for job in snap.jobs)
            assert waiting == args.trials, f"the snapshot saw {waiting} waiting trials, not {args.trials}"
            on_tables = timed_ms(
                lambda: queue.snapshot(conn, "gpus", capacity=CAPACITY).plan().admits(jobs[-1].id), 300
            )
            row_read = timed_ms(
                lambda: conn.execute(
                    select(schema.experiments).where(schema.experiments.c.id == jobs[-1].id)
                ).first(),
                300,
            )
        engine.dispose()

    print(f"gate decision, {args.trials} waiting trials across {args.jobs} jobs, pool of {CAPACITY} slots")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"{'':28}{'median ms':>11}{'baseline':>10}{'ratio':>7}{'fastest ms':>12}{'baseline':>10}{'ratio':>7}"
    )
    for label, (value, fast), (base, base_fast) in (
        ("pure plan", pure, trivial),
        ("snapshot + plan (SQLite)", on_tables, row_read),
    ):
        print(
            f"{label:28}{value:11.4f}{base:10.4f}{value / base:7.1f}{fast:12.4f}{base_fast:10.4f}{fast / base_fast:7.1f}"
        )
    verdict = "meets" if on_tables[0] < TARGET_MS else "misses"
    print(
        f"target < {TARGET_MS} ms per decision: the median on the tables {verdict} it ({on_tables[0]:.3f} ms)"
    )


if __name__ == "__main__":
    main()
