"""Experiments whose trials run in Docker containers (``airflow.trial_runner: docker``), on a real
Airflow and PostgreSQL and a real Docker daemon, driven with the `det` CLI as a user would."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from det_airflow.operators.runners import LABEL_EXPERIMENT
from tests.integration.det_env import EXAMPLE, DetEnv

pytestmark = pytest.mark.integration

DIST_TRAIN = textwrap.dedent(
    """\
    import logging

    import torch
    import torch.distributed as dist

    import det_airflow as det

    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        rank, size = core_context.distributed.rank, core_context.distributed.size
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        logging.info("rank %d of %d on %s: all-reduced sum %g", rank, size, dist.get_backend(), total.item())
        if rank == 0:
            core_context.train.report_validation_metrics(1, {"validation_loss": 1.0 / total.item()})
    """
)


@pytest.fixture(scope="module")
def det(trial_image: str, airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def docker_config(tmp_path: Path, **changes: Any) -> Path:
    """The example's const.yaml, shortened, running in Docker, with ``changes`` merged in."""
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 100}
    config["airflow"] = {"trial_runner": "docker"}
    config.update(changes)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def wait_completed(det: DetEnv, experiment_id: int) -> dict[str, Any]:
    """The experiment once it ended; fails with its trials' logs unless it COMPLETED."""
    answer = det.wait_experiment(experiment_id, timeout=600)
    if answer["experiment"]["state"] != "COMPLETED":
        logs = [det.det("trial", "logs", str(t["id"]), check=False).stdout[-3000:] for t in answer["trials"]]
        pytest.fail(
            f"experiment {experiment_id} ended {answer['experiment']['state']}; trial logs:\n"
            + "\n".join(logs)
        )
    return answer


def trial_containers(experiment_id: int) -> list[dict[str, Any]]:
    with docker.APIClient() as client:
        return list(client.containers(all=True, filters={"label": f"{LABEL_EXPERIMENT}={experiment_id}"}))


def test_one_rank_trains_in_a_container_with_metrics_checkpoints_and_logs(
    det: DetEnv, tmp_path: Path
) -> None:
    experiment_id = det.create(docker_config(tmp_path, name="docker one rank"))

    answer = wait_completed(det, experiment_id)

    (trial,) = answer["trials"]
    assert trial["total_batches"] == 100
    validation = det.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [50, 100]
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    assert checkpoints, "no checkpoint registered"
    assert Path(checkpoints[-1]["storage"]["path"]).is_dir(), (
        "the checkpoint written in the container is not on the host"
    )
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    # `[timestamp] <container-id> || LEVEL: message`: the id is the trial's container's.
    assert re.search(r"^\[\S+\] [0-9a-f]{12} \|\| INFO: batch 50: ", logs, re.MULTILINE), logs[-2000:]
    assert trial_containers(experiment_id) == []


def test_two_slots_run_two_gloo_ranks_in_one_container(det: DetEnv, tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "dist_train.py").write_text(DIST_TRAIN)
    config = docker_config(
        tmp_path,
        name="docker two ranks",
        entrypoint="python3 -m det_airflow.launchers.torch_distributed python3 dist_train.py",
        resources={"slots_per_trial": 2},
    )
    experiment_id = det.create(config, context)

    answer = wait_completed(det, experiment_id)

    (trial,) = answer["trials"]
    validation = det.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["metrics"]["validation_loss"] for m in validation] == [pytest.approx(1 / 3)]
    for rank in (0, 1):
        logs = det.det("trial", "logs", str(trial["id"]), "--rank-id", str(rank)).stdout
        assert f"rank {rank} of 2 on gloo: all-reduced sum 3" in logs, logs[-2000:]


def test_a_container_that_fails_once_resumes_from_its_checkpoint(
    det: DetEnv, tmp_path: Path, host_share: Path
) -> None:
    # A folder under [det] allowed_host_paths, writable by the trial's own uid.
    markers = host_share / "markers"
    markers.mkdir()
    markers.chmod(0o1777)
    config = docker_config(
        tmp_path,
        name="docker fail once",
        max_restarts=2,
        environment={"environment_variables": ["FAIL_ONCE_MARKER=/markers/failed-once"]},
        bind_mounts=[{"host_path": str(markers), "container_path": "/markers"}],
    )
    experiment_id = det.create(config)

    answer = wait_completed(det, experiment_id)

    assert (markers / "failed-once").exists(), "the trial never failed"
    (trial,) = answer["trials"]
    assert (trial["restarts"], trial["total_batches"]) == (1, 100)
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert "FAIL_ONCE_MARKER: failing once" in logs
    assert "resumed from checkpoint" in logs
    training = det.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    steps = [m["steps_completed"] for m in training]
    assert steps == sorted(set(steps)), steps  # a restart from batch 0 would report a step twice
    assert trial_containers(experiment_id) == []


def test_the_distributed_example_trains_with_ddp_in_a_container(det: DetEnv, tmp_path: Path) -> None:
    config = yaml.safe_load((EXAMPLE / "distributed.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 100}
    config["min_validation_period"] = {"batches": 50}
    config["airflow"] = {"trial_runner": "docker"}
    path = tmp_path / "distributed.yaml"
    path.write_text(yaml.safe_dump(config))
    experiment_id = det.create(path)

    answer = wait_completed(det, experiment_id)

    (trial,) = answer["trials"]
    # The chief alone reports: one validation per period, although two ranks trained.
    validation = det.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [50, 100]
    assert validation[-1]["metrics"]["accuracy"] > 0.5
    for rank in (0, 1):
        logs = det.det("trial", "logs", str(trial["id"]), "--rank-id", str(rank)).stdout
        assert f"worker {rank} of 2: 16 images a batch" in logs, logs[-2000:]
    assert trial_containers(experiment_id) == []


def test_a_notebook_in_the_trial_image_runs_a_kernel_through_the_proxy(det: DetEnv) -> None:
    """A notebook of a Docker config gets the trial's container: JupyterLab from the trial image,
    reached only through the master's proxy."""
    import json
    import time
    import uuid

    import httpx
    from websockets.sync.client import connect

    login = httpx.post(
        f"{det.af.url}/auth/token",
        json={"username": det.af.admin_user, "password": det.af.admin_password},
        timeout=30,
    )
    bearer = {"Authorization": f"Bearer {login.json()['access_token']}"}
    with det.api() as client:
        body = {"type": "notebook", "config": yaml.safe_dump({"airflow": {"trial_runner": "docker"}})}
        task = client.post("/det/api/v1/tasks", json=body).raise_for_status().json()["task"]
    deadline = time.monotonic() + 600
    while not (task := det.get(f"/tasks/{task['id']}")["task"])["ready"]:
        assert task["state"] != "TERMINATED" and time.monotonic() < deadline, task
        time.sleep(1)
    assert [c["State"] for c in trial_containers(task["id"])] == ["running"]

    base = f"/det/proxy/{task['id']}"
    with httpx.Client(base_url=det.af.url, headers=bearer, timeout=60) as client:
        kernel = client.post(f"{base}/api/kernels", json={}).raise_for_status().json()
    url = det.af.url.replace("http://", "ws://", 1) + f"{base}/api/kernels/{kernel['id']}/channels"
    with connect(url, additional_headers=bearer, open_timeout=60) as ws:
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "session": msg_id, "version": "5.3"}
        code = "import os; os.getuid() != 0 and 6 * 7"
        content = {"code": code, "silent": False}
        ws.send(
            json.dumps(
                {
                    "header": header,
                    "parent_header": {},
                    "metadata": {},
                    "content": content,
                    "channel": "shell",
                }
            )
        )
        result = None
        while result is None:
            message = json.loads(ws.recv(timeout=120))
            if (
                message.get("msg_type") == "execute_result"
                and message["parent_header"].get("msg_id") == msg_id
            ):
                result = message["content"]["data"]["text/plain"]
    assert result == "42"  # run in the container, not as root

    with det.api() as client:
        client.post(f"/det/api/v1/tasks/{task['id']}/kill").raise_for_status()
    deadline = time.monotonic() + 180
    while det.get(f"/tasks/{task['id']}")["task"]["state"] != "TERMINATED":
        assert time.monotonic() < deadline
        time.sleep(1)
    assert trial_containers(task["id"]) == []
