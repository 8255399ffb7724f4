"""A real trial in a real cluster, as a trial task runs it without holding a worker: the runner submits
its pod, the trigger watches it (with the provider's async hook) until it ended, and the runner
collects it: the pod fetched the context from the master and ran the entrypoint, its output comes
back, its exit code is the run's, and the pod is gone afterwards.

Needs a cluster (``KUBECONFIG``) that has the trial image (``make trial-image``, then for kind
``kind load docker-image det-airflow-trial:cpu``; or set ``DET_K8S_TRIAL_IMAGE``), and the address
its pods reach this machine at (``DET_K8S_HOST_ADDRESS``, e.g. the kind network's gateway), where the
test serves the master. ``DET_K8S_NAMESPACE`` picks the namespace (default ``default``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow.config import config_to_dict, parse_config
from det_airflow.master import auth
from det_airflow.master.auth import SERVICE_TOKEN_SETTING, hash_token
from det_airflow.master.db import set_setting
from det_airflow.operators.runners import (
    DEFAULT_IMAGES,
    LABEL_TRIAL,
    ContainerTrial,
    build_runner,
    container_environment,
)
from det_airflow.operators.runners.kubernetes import KubernetesRunner
from det_airflow.operators.triggers import KubernetesTrialTrigger
from det_airflow.trial_process import TrialSpec, trial_environment
from tests.unit.master.creating import Creator, b64, creator, tar_gz  # noqa: F401
from tests.unit.master.people_app import people  # noqa: F401
from tests.unit.operators.test_kubernetes_context import TOKEN, MasterOverHttp, add_trial

pytestmark = pytest.mark.kubernetes
SERVICE_TOKEN = "service-token"

TRAIN = b"""\
import json, os
print(f"[rank=0] hello from trial {os.environ['DET_TRIAL_ID']}", flush=True)
print("[rank=0] config " + json.load(open(os.environ["DET_EXPERIMENT_CONFIG_FILE"]))["name"], flush=True)
raise SystemExit(3)
"""


@pytest.fixture
def cluster_settings(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    kubeconfig, host = os.environ.get("KUBECONFIG"), os.environ.get("DET_K8S_HOST_ADDRESS")
    if not kubeconfig:
        pytest.skip("needs a Kubernetes cluster: KUBECONFIG is not set")
    if not host:
        pytest.skip("needs DET_K8S_HOST_ADDRESS: the address the cluster's pods reach this machine at")
    # The connection a platform engineer would set: the provider's kubernetes_default, from a kubeconfig.
    extra = {"kube_config_path": kubeconfig}
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    return {
        "host": host,
        "namespace": os.environ.get("DET_K8S_NAMESPACE", "default"),
        "image": os.environ.get("DET_K8S_TRIAL_IMAGE", DEFAULT_IMAGES["cpu"]),
    }


@pytest.fixture
def served_master(
    cluster_settings: dict[str, str],
    creator: Creator,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[str, str, int, int]]:
    """(URL the pods reach the master at, URL the trigger reaches it at, experiment id, trial id)."""
    config = (
        "name: k8s-e2e\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 1}\n"
    )
    experiment_id = creator.create(config=config, context=b64(tar_gz({"train.py": TRAIN}))).json()[
        "experiment"
    ]["id"]
    with creator.people.db.begin() as conn:
        set_setting(conn, SERVICE_TOKEN_SETTING, hash_token(SERVICE_TOKEN))
    monkeypatch.setattr(auth, "_service_hash_cache", (0.0, None))
    server = MasterOverHttp(creator.people, bind="0.0.0.0")
    with server:
        yield (
            f"http://{cluster_settings['host']}:{server.port}",
            server.url,
            experiment_id,
            add_trial(creator.people, experiment_id),
        )


def test_a_one_rank_trial_runs_in_a_pod_and_leaves_nothing_behind(
    served_master: tuple[str, str, int, int], cluster_settings: dict[str, str], tmp_path: Path
) -> None:
    master_url, local_url, experiment_id, trial_id = served_master
    config = config_to_dict(
        parse_config(
            {
                "name": "k8s-e2e",
                "entrypoint": "python3 train.py",
                "searcher": {"name": "single", "metric": "loss", "max_length": 1},
                "environment": {"image": cluster_settings["image"]},
                "resources": {"slots_per_trial": 1},
                "airflow": {"trial_runner": "kubernetes", "namespace": cluster_settings["namespace"]},
            }
        )
    )
    spec = TrialSpec(
        trial_id=trial_id, experiment_id=experiment_id, request_id="1", trial_seed=1, config=config, run_id=1
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = trial_environment(
        spec, master_url=master_url, token=TOKEN, slot_ids=[0], base_env={}, workdir=workdir
    )
    trial = ContainerTrial(
        spec=spec, workdir=workdir, argv=(sys.executable, "train.py"),
        env=container_environment(env, config, "cpu", [0], workdir), slot_ids=(0,),
    )  # fmt: skip
    runner = build_runner("kubernetes", config)
    assert isinstance(runner, KubernetesRunner)
    lines: list[str] = []

    workload = runner.submit(trial)
    trigger = KubernetesTrialTrigger(
        local_url, SERVICE_TOKEN, experiment_id, trial_id, workload.to_dict(), poll_interval=1.0, min_wait=0
    )

    async def first_event() -> dict[str, object]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=600))
    assert event == {"status": "ended"}, event
    code = runner.collect(workload, on_output=lambda line, _stream: lines.append(line))

    assert code == 3, "\n".join(lines)
    assert f"[rank=0] hello from trial {trial_id}" in lines
    assert "[rank=0] config k8s-e2e" in lines
    left = runner.cluster.core.list_namespaced_pod(
        cluster_settings["namespace"], label_selector=f"{LABEL_TRIAL}={trial_id}"
    )
    assert [p.metadata.name for p in left.items if p.metadata.deletion_timestamp is None] == []
