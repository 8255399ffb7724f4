"""Placement decision: the time the master takes to admit a waiting trial and choose its host.

A pool spans 100 hosts × 8 slots; 50 jobs (gangs of 1, 2 and 4 slots, a mix of priorities) wait
with 1,000 trials between them, while half of the jobs already hold slots spread over the
hosts. Timed, each as the median (and the fastest) of many repetitions in this one run, against
the same steps for a baseline of 1 host × 8 slots and 10 waiting trials:

- admission: :func:`det_airflow.master.queue_policy.plan` over the pool's jobs;
- placement of one trial: :func:`det_airflow.master.placement.best_fit` over the live hosts;
- the decision for one trial: both together (the figure the < 5 ms target is about);
- placing every waiting trial in queue order: :func:`det_airflow.master.placement.place`;
- the hosts' loads as the master reads them for each placement (:func:`det_airflow.master.hosts.loads`
  on SQLite: the live hosts and the trials holding their slots), plus best fit.

    .venv/bin/python benchmarks/placement.py [--hosts 100] [--slots 8] [--jobs 50] [--trials 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _timing import timed_ms  # noqa: E402
from sqlalchemy import create_engine  # noqa: E402

from det_airflow.master import hosts as master_hosts  # noqa: E402
from det_airflow.master import placement, queue_policy, schema  # noqa: E402

GANGS = (1, 2, 4)
TARGET_MS = 5.0


@dataclass(frozen=True)
class Cluster:
    """One pool as the decision sees it: its jobs, its hosts' loads, and its capacity."""

    jobs: list[queue_policy.Job]
    hosts: list[placement.HostLoad]

    @property
    def capacity(self) -> int:
        return sum(host.slots for host in self.hosts)

    def waiting_gangs(self) -> list[int]:
        """Every waiting trial's gang, in scheduling order."""
        order = sorted(self.jobs, key=queue_policy.order_key)
        return [job.slots_per_trial for job in order for _ in range(job.waiting)]

    def decide(self) -> str | None:
        """Admit by the queue, then place the first admitted job's next trial."""
        plan = queue_policy.plan(self.capacity, self.jobs)
        job = next((j for j in plan.order if plan.admits(j.id)), None)
        return None if job is None else placement.best_fit(self.hosts, job.slots_per_trial)


def build(hosts: int, slots: int, jobs: int, trials: int) -> Cluster:
    """``jobs`` jobs sharing ``trials`` waiting trials; every other job also runs six trials,
    placed on the hosts by best fit, so the hosts are unevenly loaded (about 40 % in use)."""
    per_job, extra = divmod(trials, jobs)
    queued = [
        queue_policy.Job(
            id=i + 1,
            priority=(10, 42, 42, 70)[i % 4],
            position=float(i + 1),
            slots_per_trial=GANGS[i % len(GANGS)],
            held=6 * GANGS[i % len(GANGS)] if i % 2 == 0 else 0,
            waiting=per_job + (1 if i < extra else 0),
        )
        for i in range(jobs)
    ]
    empty = [placement.HostLoad(f"host-{n:03d}", slots) for n in range(hosts)]
    running = [job.slots_per_trial for job in queued for _ in range(job.held // job.slots_per_trial)]
    used = {host.id: 0 for host in empty}
    for gang, host_id in zip(running, placement.place(empty, running), strict=True):
        if host_id is not None:
            used[host_id] += gang
    loads = [placement.HostLoad(host.id, slots, used[host.id]) for host in empty]
    return Cluster(jobs=queued, hosts=loads)


def _fill(conn, cluster: Cluster) -> None:  # type: ignore[no-untyped-def]
    """The cluster on the det tables: its hosts, its jobs, their running trials placed on the hosts
    as the cluster's loads say, and their waiting trials."""
    now = datetime.now(UTC)
    conn.execute(
        schema.hosts.insert(),
        [
            {"id": h.id, "slot_type": "cpu", "slots": h.slots, "devices": [], "queue": f"det-host-{h.id}",
             "address": h.id, "registered_at": now, "last_seen": now}
            for h in cluster.hosts
        ],
    )  # fmt: skip
    free = {h.id: h.used for h in cluster.hosts}  # slots still to hand to running trials
    for job in cluster.jobs:
        conn.execute(
            schema.experiments.insert().values(
                id=job.id, name=f"job-{job.id}", owner="alice", labels=[], state="ACTIVE",
                config={"resources": {"slots_per_trial": job.slots_per_trial}}, config_yaml="",
                resource_pool="gpus", searcher_name="random", search_done=False, progress=0.0,
                start_time=now, archived=False,
            )
        )  # fmt: skip
        rows: list[dict[str, object]] = []
        for n in range(job.held // job.slots_per_trial + job.waiting):
            running = n < job.held // job.slots_per_trial
            host = (
                next((h for h, left in free.items() if left >= job.slots_per_trial), None)
                if running
                else None
            )
            if host is not None:
                free[host] -= job.slots_per_trial
            rows.append(
                {"experiment_id": job.id, "request_id": n, "state": "RUNNING" if running else "QUEUED",
                 "hparams": {}, "trial_seed": n, "summary": {}, "run_id": int(running), "host": host}
            )  # fmt: skip
        conn.execute(schema.trials.insert(), rows)


def on_tables(cluster: Cluster, repeat: int) -> tuple[float, float]:
    """(median, fastest) ms of reading the hosts' loads from SQLite and placing one trial."""
    gang = cluster.waiting_gangs()[0]
    with tempfile.TemporaryDirectory() as folder:
        engine = create_engine(f"sqlite:///{folder}/det.db")
        schema.metadata.create_all(engine)
        with engine.begin() as conn:
            _fill(conn, cluster)
        with engine.connect() as conn:
            loads = master_hosts.loads(conn)
            assert len(loads) == len(cluster.hosts), f"{len(loads)} live hosts read, not {len(cluster.hosts)}"
            timed = timed_ms(lambda: placement.best_fit(master_hosts.loads(conn), gang), repeat)
        engine.dispose()
    return timed


def measure(cluster: Cluster, repeat: int) -> dict[str, tuple[float, float]]:
    gangs = cluster.waiting_gangs()
    one = gangs[0]
    return {
        "hosts' loads on SQLite + best_fit": on_tables(cluster, max(repeat // 10, 20)),
        "admission (plan)": timed_ms(lambda: queue_policy.plan(cluster.capacity, cluster.jobs), repeat),
        "placement of one trial (best_fit)": timed_ms(lambda: placement.best_fit(cluster.hosts, one), repeat),
        "decision for one trial (plan + best_fit)": timed_ms(cluster.decide, repeat),
        "every waiting trial (place)": timed_ms(lambda: placement.place(cluster.hosts, gangs), repeat // 10),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()

    big = build(args.hosts, args.slots, args.jobs, args.trials)
    small = build(1, args.slots, 5, 10)
    placed = placement.place(big.hosts, big.waiting_gangs())
    measured = measure(big, args.repeat)
    baseline = measure(small, args.repeat)

    print(
        f"placement decision, {args.trials} waiting trials in {args.jobs} jobs (gangs {GANGS}), "
        f"{args.hosts} hosts × {args.slots} slots ({sum(h.used for h in big.hosts)} in use); "
        f"baseline 1 host × {args.slots} slots, 10 waiting trials"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| step | median ms | baseline ms | ratio | fastest ms | baseline fastest ms | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, (value, fast) in measured.items():
        base, base_fast = baseline[label]
        print(
            f"| {label} | {value:.4f} | {base:.4f} | {value / base:.1f} "
            f"| {fast:.4f} | {base_fast:.4f} | {fast / base_fast:.1f} |"
        )
    decision = sum(
        measured[k][0]
        for k in ("decision for one trial (plan + best_fit)", "hosts' loads on SQLite + best_fit")
    )
    verdict = "meets" if decision < TARGET_MS else "misses"
    print(
        f"\n`place` put {sum(p is not None for p in placed)} of {len(placed)} waiting trials on a host "
        f"(the rest wait for slots).\ntarget < {TARGET_MS} ms per decision (plan, loads read, best fit): "
        f"the median {verdict} it ({decision:.3f} ms)"
    )


if __name__ == "__main__":
    main()
