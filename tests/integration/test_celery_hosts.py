"""det-airflow across hosts on Airflow's CeleryExecutor: two Celery workers, each a host of its own
(its host id, 2 CPU slots, its Celery queue and trial folders), Redis from Debian, PostgreSQL, and
checkpoints in an S3-compatible store (moto's standalone server).

What is simulated: the "hosts" are processes of this one machine (separate Celery workers with
their own host ids, queues, trial work and lock folders); a host's death is its worker's processes
and its trials' processes killed with SIGKILL; a broker crash is Redis killed with SIGKILL and
started again on its port, with what its append-only file kept; a machine joining the cluster is one
more Celery worker started with a host id, slots and folders of its own.

The tests run in file order and share one Airflow: the host added is stopped before the last test,
which kills a host for good.

- Trials of 2 slots each are placed whole, each on one host, never two on one 2-slot host at once;
  every trial's record names the host it ran on, and `det agent list` / `det slot list` show both.
  The hosts, not the API server, remove the checkpoints garbage collection and `det e delete` let
  go, and each host its own trial work folder.
- The broker restarted mid-trial: the running trials go on in their first run, no training step
  stored twice, and the trial queued behind them starts afterwards and completes.
- A trial of 4 slots, more than either host has, runs across both at once, two workers of one
  torch.distributed (gloo) world on each; one worker failing stops the others, and the whole gang
  restarts from the trial's latest checkpoint, no training step stored twice.
- A host added while a trial waits (6 slots, more than the live hosts have together): the trial
  starts whole on the new host (6 slots) and completes there; `det agent list` shows the new host.
- A host killed mid-trial: its heartbeat stops, its trial's run is lost, and the trial restarts on
  the other host from its latest checkpoint in the bucket, no training step stored twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml

from det_airflow.localairflow import (
    CeleryLayout,
    CeleryWorker,
    LocalAirflow,
    celery_workers,
    service_port,
    write_config,
)
from tests.integration.conftest import default_config_extra, free_port
from tests.integration.det_env import DetEnv, wait_until
from tests.s3_server import s3_client, s3_server

pytestmark = pytest.mark.integration

BUCKET = "det-celery"
HOSTS = ("worker-1", "worker-2")

# Trains STEPS steps of STEP_SECONDS each, checkpointing each step before reporting it (a run killed
# between the two never reports a step the restart reports again); resumes from the latest checkpoint.
TRAIN = """\
import os
import time

import det_airflow as det

steps = int(os.environ["STEPS"])
info = det.get_cluster_info()
with det.core.init() as core:
    start = 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = int((path / "step").read_text())
        print(f"resumed at step {start}", flush=True)
    for step in range(start + 1, steps + 1):
        time.sleep(float(os.environ["STEP_SECONDS"]))
        with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
            (path / "step").write_text(str(step))
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
"""

# TRAIN as torch.distributed workers: the chief restores, checkpoints and reports, and tells the
# others where to start; a barrier ends each step. In the first run (started at step 0), rank 2
# (node 1's first worker) exits after step 2 is stored, as a crash would.
TRAIN_DDP = """\
import os
import time

import torch
import torch.distributed as dist

import det_airflow as det

steps = int(os.environ["STEPS"])
info = det.get_cluster_info()
with det.core.init(distributed=det.core.DistributedContext.from_torch_distributed()) as core:
    rank, size = core.distributed.rank, core.distributed.size
    world = torch.ones(1)
    dist.all_reduce(world)
    start = 0
    if core.distributed.is_chief and info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = int((path / "step").read_text())
        print(f"resumed at step {start}", flush=True)
    start = core.distributed.broadcast(start)
    node = os.environ["DET_CONTAINER_RANK"]
    print(f"rank {rank} of {size} on node {node}: world size {world.item():g}, from step {start}", flush=True)
    for step in range(start + 1, steps + 1):
        time.sleep(float(os.environ["STEP_SECONDS"]))
        dist.all_reduce(torch.ones(1))
        if core.distributed.is_chief:
            with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "step").write_text(str(step))
            core.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
            core.train.flush()  # stored before the barrier lets rank 2 fail
        dist.barrier()
        if start == 0 and step == 2 and rank == 2:
            print(f"rank {rank} fails after step {step}", flush=True)
            os._exit(3)
"""


def _database(postgres_url: str, name: str) -> str:
    """A database of its own on the tests' PostgreSQL server (created if missing)."""
    conn = psycopg2.connect(postgres_url.replace("/airflow", "/postgres"))
    try:
        conn.autocommit = True  # CREATE DATABASE runs outside a transaction
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    scheme, _, rest = postgres_url.partition("://")
    return f"postgresql+psycopg2://{rest.rsplit('/', 1)[0]}/{name}"


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with s3_server(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def celery_airflow(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAirflow]:
    base = tmp_path_factory.mktemp("celery-airflow")
    extra = default_config_extra()
    # A dead host is noticed within seconds: its heartbeat (every 5 s) counts for 8 s, and Airflow
    # fails a task whose supervisor stopped heartbeating after 20 s.
    extra["det"] = {**extra["det"], "host_timeout": "8"}
    extra["scheduler"] = {
        "task_instance_heartbeat_timeout": "20",
        "task_instance_heartbeat_timeout_detection_interval": "5",
    }
    af = write_config(
        base / "home",
        sql_alchemy_conn=_database(postgres_url, "airflow_celery"),
        dags_folder=base / "dags",
        port=free_port(),
        extra=extra,
        # Redis on a port outside the ephemeral range: the workers reconnecting while it restarts
        # can never take it as their own end of a connection.
        celery=CeleryLayout(service_port(), celery_workers(len(HOSTS), host_slots=2)),
    )
    try:
        af.migrate()
        af.start()
        af.wait_ready(timeout=300)
    except Exception as e:
        af.stop()
        pytest.fail(f"the Celery Airflow did not start: {e}\n\n{af.log_tails()}", pytrace=False)
    try:
        yield af
    finally:
        af.stop()


@pytest.fixture(scope="module")
def det(celery_airflow: LocalAirflow, s3_url: str, tmp_path_factory: pytest.TempPathFactory) -> DetEnv:
    extra = json.dumps({"endpoint_url": s3_url, "region_name": "us-east-1"})
    celery_airflow.airflow("connections", "delete", "aws_default")
    added = celery_airflow.airflow(
        "connections", "add", "aws_default", "--conn-type", "aws",
        "--conn-login", "det", "--conn-password", "det", "--conn-extra", extra,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    env = DetEnv.install(celery_airflow, tmp_path_factory.mktemp("det-config"))
    # Each worker's heartbeat reads det_default, which `det admin migrate` just made.
    wait_until(lambda: _alive(env) == set(HOSTS) or None, timeout=60, what="both hosts to report")
    return env


def _alive(det: DetEnv) -> set[str]:
    return {a["id"] for a in det.get("/agents")["agents"] if a["alive"]}


def _experiment(
    tmp_path: Path,
    name: str,
    *,
    trials: int,
    steps: int,
    step_seconds: float,
    slots: int = 2,
    entrypoint: str = "python3 train.py",
    script: str = TRAIN,
) -> tuple[Path, Path]:
    """The experiment's config and context; ``script`` is the file the entrypoint's last word names."""
    context = tmp_path / "context"
    context.mkdir(exist_ok=True)
    (context / entrypoint.split()[-1]).write_text(script)
    config = {
        "name": name,
        "entrypoint": entrypoint,
        "hyperparameters": {"x": {"type": "categorical", "vals": list(range(trials))}},
        "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": steps}},
        "resources": {"slots_per_trial": slots},
        "max_restarts": 2,
        "checkpoint_storage": {"type": "s3", "bucket": BUCKET, "prefix": name, "save_trial_latest": 1},
        "environment": {"environment_variables": [f"STEPS={steps}", f"STEP_SECONDS={step_seconds}"]},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, context


def _runs(det: DetEnv, trial_id: int) -> list[tuple[float, float]]:
    """(start, end) of each run of a trial, from its state changes."""
    changes = det.get(f"/trials/{trial_id}/state-changes")["state_changes"]
    runs, started = [], None
    for change in changes:
        at = datetime.fromisoformat(change["time"]).timestamp()
        if change["to"] == "STARTING":
            started = at
        elif started is not None and change["to"] not in ("PULLING", "STARTING", "RUNNING"):
            runs.append((started, at))
            started = None
    return runs


def test_gangs_are_placed_whole_on_both_hosts(det: DetEnv, s3_url: str, tmp_path: Path) -> None:
    config, context = _experiment(tmp_path, "placed", trials=4, steps=4, step_seconds=0.5)
    experiment_id = det.create(config, context)
    experiment = det.wait_experiment(experiment_id, timeout=400)["experiment"]
    trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]

    assert experiment["state"] == "COMPLETED", [t["state"] for t in trials]
    assert len(trials) == 4
    assert all(len(t["hosts"]) == 1 and t["hosts"][0] in HOSTS for t in trials), [t["hosts"] for t in trials]
    assert {t["hosts"][0] for t in trials} == set(HOSTS), "one host ran every trial"
    # Each host has 2 slots and each trial holds 2: no two runs on one host overlap.
    for host in HOSTS:
        runs = sorted(run for t in trials if t["host"] == host for run in _runs(det, t["id"]))
        for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
            assert start >= end - 0.5, f"two trials held {host}'s slots at once: {runs}"

    agents = det.det("agent", "list").stdout
    for host in HOSTS:
        assert host in agents and f"det-host-{host}" in agents
    slots = det.det("slot", "list", "--json").stdout
    assert sorted({s["agent_id"] for s in json.loads(slots)}) == list(HOSTS)
    described = det.det("trial", "describe", str(trials[0]["id"])).stdout
    assert trials[0]["hosts"][0] in described

    # The hosts remove files, not the API server: garbage collection keeps each trial's latest.
    kept = {t["latest_checkpoint"] for t in trials}
    wait_until(
        lambda: _checkpoint_uuids(s3_url, "placed") == kept or None, "the bucket to hold the kept only"
    )
    work_dirs = [det.af.home / "hosts" / host / "trials" / f"exp_{experiment_id}" for host in HOSTS]
    assert all(folder.is_dir() for folder in work_dirs)
    det.wait_dag_run(experiment)
    deleted = det.det("experiment", "delete", str(experiment_id), "--yes").stdout
    assert "the trial work directory on worker-1; the trial work directory on worker-2" in deleted
    wait_until(
        lambda: not _checkpoint_uuids(s3_url, "placed") and not any(f.exists() for f in work_dirs) or None,
        "the deleted experiment's objects and both hosts' trial work folders removed",
    )


# A trial of bob's goes after the broker and the metadata database the way a hostile one would:
# Redis on its port (taking a queued task's message, which names the DAG file the worker parses as
# root), Redis's password in its files, the database's port. Each attempt prints `PRY <what>: ...`.
PRY_BROKER = """\
import os, socket
from pathlib import Path

home = Path(os.environ["AIRFLOW_HOME_OF_TEST"])


def attempt(what, action):
    try:
        found = action()
    except Exception as exc:
        print(f"PRY {what}: refused ({type(exc).__name__})", flush=True)
    else:
        print(f"PRY {what}: GOT {found!r}"[:300], flush=True)


def take_a_queued_message(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"BRPOP default 1\\r\\n")
        return s.recv(4096)


attempt("broker", lambda: take_a_queued_message(int(os.environ["REDIS_PORT"])))
attempt("broker password in airflow.cfg", lambda: (home / "airflow.cfg").read_text())
attempt("broker password in redis.conf", lambda: (home / "redis" / "redis.conf").read_text())
attempt("metadata database", lambda: socket.create_connection(("127.0.0.1", int(os.environ["DB_PORT"])), 5))
print(f"PRY uid {os.getuid()}", flush=True)
"""


def test_a_trial_reaches_neither_the_broker_nor_the_metadata_database(
    det: DetEnv, postgres_url: str, tmp_path: Path
) -> None:
    assert det.af.celery is not None
    db_port = int(postgres_url.rsplit(":", 1)[1].split("/", 1)[0])
    config, context = _experiment(
        tmp_path, "pry-broker", trials=1, steps=1, step_seconds=0, slots=1,
        entrypoint="python3 pry.py", script=PRY_BROKER,
    )  # fmt: skip
    loaded = yaml.safe_load(config.read_text())
    loaded.pop("checkpoint_storage")
    loaded["environment"]["environment_variables"] += [
        f"AIRFLOW_HOME_OF_TEST={det.af.home}",
        f"REDIS_PORT={det.af.celery.redis_port}",
        f"DB_PORT={db_port}",
    ]
    loaded["searcher"]["metric"] = "loss"
    config.write_text(yaml.safe_dump(loaded))
    experiment_id = det.create(config, context)
    det.wait_experiment(experiment_id, timeout=400)
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert "PRY uid " in logs, logs
    for what in (
        "broker",
        "broker password in airflow.cfg",
        "broker password in redis.conf",
        "metadata database",
    ):
        assert f"PRY {what}: refused" in logs, f"{what} was not refused:\n{logs}"
    assert "GOT" not in logs


def _checkpoint_uuids(s3_url: str, prefix: str) -> set[str]:
    """The checkpoints in the bucket under ``prefix`` (beside them: the trials' TensorBoard events)."""
    listed = s3_client(s3_url).list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/").get("Contents", [])
    return {o["Key"].split("/")[1] for o in listed} - {"tensorboard"}


def _training_steps(det: DetEnv, trial_id: int) -> list[int]:
    """The steps of a trial's stored training metrics, in the order stored."""
    metrics = det.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]
    return [m["steps_completed"] for m in metrics]


def _restart_broker(af: LocalAirflow) -> None:
    """Redis crashes (SIGKILL, losing what it held) and localairflow starts it again on its port."""
    pid = int((af.home / "pids" / "redis.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: af.status()["redis"] is None, timeout=30, what="Redis to die")
    # The workers keep reconnecting to the dead port, which lies in the ephemeral range: one of
    # their attempts may connect to itself and hold the port for a moment (TCP self-connect).
    assert af.celery is not None
    port = af.celery.redis_port
    wait_until(lambda: not _port_answers(port), timeout=60, what=f"port {port} to be free")
    af.start()  # starts what does not run: Redis alone


def _port_answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_running_trials_continue_across_a_broker_restart(det: DetEnv, tmp_path: Path) -> None:
    steps = 24
    config, context = _experiment(tmp_path, "broker", trials=3, steps=steps, step_seconds=0.5)
    experiment_id = det.create(config, context)

    def training_on_every_host() -> list[dict[str, Any]] | None:
        trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]
        running = [t for t in trials if t["state"] == "RUNNING" and t["total_batches"] >= 2]
        return running if len(running) == len(HOSTS) else None

    running = wait_until(training_on_every_host, timeout=180, what="a trial training on each host")
    assert running is not None
    restarted_at = time.time()
    _restart_broker(det.af)
    after = {t["id"]: t for t in det.get(f"/experiments/{experiment_id}/trials")["trials"]}
    assert all(
        after[t["id"]]["state"] == "RUNNING" and after[t["id"]]["total_batches"] < steps for t in running
    ), f"a trial ended before the broker came back: {after}"
    det.af.wait_ready(timeout=300)  # Redis answers, and every worker answers Celery's ping through it
    experiment = det.wait_experiment(experiment_id, timeout=400)["experiment"]
    trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]

    assert experiment["state"] == "COMPLETED", [(t["id"], t["state"], t["restarts"]) for t in trials]
    assert len(trials) == 3
    for trial in trials:
        assert _training_steps(det, trial["id"]) == list(range(1, steps + 1)), trial
    by_id = {t["id"]: t for t in trials}
    for trial in running:
        runs = _runs(det, trial["id"])
        assert by_id[trial["id"]]["restarts"] == 0 and len(runs) == 1, (trial["id"], runs)
    (queued,) = [t for t in trials if t["id"] not in {r["id"] for r in running}]
    ((started, _),) = _runs(det, queued["id"])
    assert started > restarted_at, "the trial queued behind started before the broker restart"
    assert len(queued["hosts"]) == 1 and queued["hosts"][0] in HOSTS, queued["hosts"]


def test_a_trial_larger_than_every_host_runs_across_two(det: DetEnv, tmp_path: Path) -> None:
    steps = 10
    config, context = _experiment(
        tmp_path,
        "across",
        trials=1,
        steps=steps,
        step_seconds=1.0,
        slots=4,
        entrypoint="python3 -m det_airflow.launchers.torch_distributed python3 train_ddp.py",
        script=TRAIN_DDP,
    )
    experiment_id = det.create(config, context)

    def held_on_both_hosts() -> list[str] | None:
        (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"] or [None]
        if not trial or trial["state"] != "RUNNING":
            return None
        slots = json.loads(det.det("slot", "list", "--json").stdout)
        holders = sorted(s["agent_id"] for s in slots if s["trial_id"] == trial["id"])
        return holders if holders == sorted(HOSTS * 2) else None

    wait_until(held_on_both_hosts, timeout=180, what="the trial to hold both hosts' slots")
    experiment = det.wait_experiment(experiment_id, timeout=400)["experiment"]
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout

    assert experiment["state"] == "COMPLETED", logs
    assert set(trial["hosts"]) == set(HOSTS), trial["hosts"]
    assert trial["restarts"] == 1, (logs, det.get(f"/trials/{trial['id']}/state-changes"))
    assert "rank 2 fails after step 2" in logs and "resumed at step 2" in logs, logs
    for rank in range(4):
        ranked = det.det("trial", "logs", str(trial["id"]), "--rank-id", str(rank)).stdout
        assert f"rank {rank} of 4 on node {rank // 2}: world size 4, from step 2" in ranked, ranked
    assert _training_steps(det, trial["id"]) == list(range(1, steps + 1))
    # The gang lets go of both hosts' slots: the next tests place trials on them.
    wait_until(
        lambda: all(a["used_slots"] == 0 for a in det.get("/agents")["agents"]) or None,
        timeout=60,
        what="both hosts' slots free again",
    )


def _slot_task_states(det: DetEnv, experiment_id: int) -> list[str]:
    """The Airflow states of the experiment's trial slot tasks."""
    experiment = det.get(f"/experiments/{experiment_id}")["experiment"]
    if not experiment.get("dag_run_id"):
        return []
    path = f"/api/v2/dags/{experiment['dag_id']}/dagRuns/{experiment['dag_run_id']}/taskInstances"
    with det.api() as client:
        instances = client.get(path).raise_for_status().json()["task_instances"]
    return [ti["state"] for ti in instances if ti["task_id"] == "trial"]


def _add_host(af: LocalAirflow, worker: CeleryWorker) -> None:
    """A machine joins the cluster: one more Celery worker, a host with its own id, slots, queue and
    folders, started by localairflow like the others."""
    assert af.celery is not None
    folder = af.home / "hosts" / worker.host_id
    folder.mkdir(exist_ok=True)
    folder.chmod(0o711)  # as for the other hosts: trials pass through to their work folders
    af.celery = dataclasses.replace(af.celery, workers=(*af.celery.workers, worker))
    af.start()  # starts what does not run: the new worker alone


def _stop_host(af: LocalAirflow, worker: CeleryWorker) -> None:
    """The host leaves as its admin stops it: SIGTERM to its worker, a warm shutdown that tells the
    master it leaves. ``af.stop()`` would still stop it, since the layout names it."""
    pid = int((af.home / "pids" / f"{worker.component}.pid").read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    wait_until(lambda: af.status()[worker.component] is None, timeout=120, what=f"{worker.host_id} to stop")


def test_a_trial_too_big_for_every_host_starts_on_a_host_added(det: DetEnv, tmp_path: Path) -> None:
    af = det.af
    assert af.celery is not None
    layout = af.celery
    config, context = _experiment(tmp_path, "wide", trials=1, steps=4, step_seconds=0.5, slots=6)
    experiment_id = det.create(config, context)
    # Its slot asked for the trial and was told to wait: the live hosts have 4 slots together.
    wait_until(
        lambda: "deferred" in _slot_task_states(det, experiment_id) or None,
        timeout=180,
        what="the trial's slot to wait for a host",
    )
    (waiting,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    assert waiting["state"] == "QUEUED" and waiting["hosts"] == [], waiting
    (job,) = [j for j in json.loads(det.det("job", "list", "--json").stdout) if j["id"] == experiment_id]
    assert (job["state"], job["acquired_slots"], job["needed_slots"]) == ("STATE_QUEUED", 0, 6), job

    added = CeleryWorker(len(layout.workers) + 1, host_slots=6)  # the trial fits whole: never split
    try:
        _add_host(af, added)
        experiment = det.wait_experiment(experiment_id, timeout=400)["experiment"]
        agents = det.det("agent", "list").stdout
    finally:
        _stop_host(af, added)
    af.celery = layout
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]

    assert experiment["state"] == "COMPLETED", det.det("trial", "logs", str(trial["id"])).stdout
    assert trial["hosts"] == [added.host_id]
    assert _training_steps(det, trial["id"]) == [1, 2, 3, 4]
    assert added.host_id in agents and f"det-host-{added.host_id}" in agents, agents
    wait_until(lambda: added.host_id not in _alive(det) or None, timeout=60, what=f"{added.host_id} to leave")


def _kill_host(af: LocalAirflow, host: str) -> None:
    """The host dies: its Celery worker's processes and the trial processes it started, at once."""
    index = HOSTS.index(host) + 1
    # The pid file's first field: the worker's pid, which leads its own session.
    session = int((af.home / "pids" / f"celery-worker-{index}.pid").read_text().split()[0])
    victims = {session}
    work_dir = str(af.home / "hosts" / host)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == session or os.readlink(entry / "cwd").startswith(work_dir):
                victims.add(int(entry.name))
        except OSError:
            continue
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_trial_of_a_killed_host_resumes_on_the_other_host(det: DetEnv, tmp_path: Path) -> None:
    config, context = _experiment(tmp_path, "fault", trials=1, steps=16, step_seconds=0.5)
    experiment_id = det.create(config, context)

    def checkpointed() -> dict[str, Any] | None:
        (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"] or [None]
        if (
            trial
            and trial["state"] == "RUNNING"
            and trial["latest_checkpoint"]
            and trial["total_batches"] >= 3
        ):
            return dict(trial)
        return None

    running = wait_until(checkpointed, timeout=180, what="the trial to checkpoint")
    assert running is not None
    dead = running["host"]
    _kill_host(det.af, dead)
    wait_until(lambda: dead not in _alive(det) or None, timeout=60, what=f"{dead} to be seen gone")
    experiment = det.wait_experiment(experiment_id, timeout=400)["experiment"]
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout

    assert experiment["state"] == "COMPLETED", logs
    (alive,) = set(HOSTS) - {dead}
    assert trial["hosts"] == [dead, alive]
    assert trial["restarts"] == 1, (logs, det.get(f"/trials/{trial['id']}/state-changes"))
    assert "resumed at step" in logs
    steps = _training_steps(det, trial["id"])
    assert steps == sorted(set(steps)) and steps[-1] == 16, "a step was stored twice or lost"
    agents = {a["id"]: a for a in det.get("/agents")["agents"]}
    assert dead not in agents or agents[dead]["alive"] is False
    assert agents[alive]["used_slots"] == 0
