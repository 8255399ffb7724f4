"""The master refuses, at submission, an experiment whose runner asks for more than the cluster's
runner policy allows (airflow.cfg [det]), naming each field; nothing of it is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

BASE: dict[str, Any] = {
    "name": "tiny",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}
REFUSED = "not allowed by the cluster's runner policy"


@pytest.fixture(autouse=True)
def _cluster(people: People, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(people.storage))
    monkeypatch.setenv("AIRFLOW__DET__KUBERNETES_CONN_ID", "kubernetes_default")


def config(**changes: Any) -> str:
    return yaml.safe_dump({**BASE, **changes})


def docker(**changes: Any) -> str:
    return config(airflow={"trial_runner": "docker"}, **changes)


def pod(spec: dict[str, Any], **changes: Any) -> str:
    return config(
        airflow={"trial_runner": "kubernetes", **changes.pop("airflow", {})},
        environment={"pod_spec": spec},
        **changes,
    )


def container(security_context: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "determined-container", "securityContext": security_context}]}}


AIRFLOW_HOME = str(Path("~/airflow").expanduser())

FORBIDDEN = {
    "airflow home mounted": (
        docker(bind_mounts=[{"host_path": AIRFLOW_HOME, "container_path": "/host_airflow"}]),
        "bind_mounts[0].host_path",
    ),
    "/etc mounted": (
        docker(bind_mounts=[{"host_path": "/etc", "container_path": "/host_etc"}]),
        "bind_mounts[0].host_path",
    ),
    "SYS_ADMIN": (docker(environment={"add_capabilities": ["SYS_ADMIN"]}), "environment.add_capabilities[0]"),
    "NET_ADMIN": (docker(environment={"add_capabilities": ["NET_ADMIN"]}), "environment.add_capabilities[0]"),
    "host device": (docker(resources={"devices": ["/dev/sda:/dev/sda"]}), "resources.devices[0].host_path"),
    "storage beside the root": (
        config(checkpoint_storage={"type": "shared_fs", "host_path": "/"}),
        "checkpoint_storage.host_path",
    ),
    "storage climbing out": (
        config(checkpoint_storage={"storage_path": "../../etc"}),
        "checkpoint_storage.storage_path",
    ),
    "privileged": (
        pod(container({"privileged": True})),
        "environment.pod_spec.spec.containers[0].securityContext.privileged",
    ),
    "runAsUser 0": (
        pod(container({"runAsUser": 0})),
        "environment.pod_spec.spec.containers[0].securityContext.runAsUser",
    ),
    "hostNetwork": (pod({"spec": {"hostNetwork": True}}), "environment.pod_spec.spec.hostNetwork"),
    "hostPID": (pod({"spec": {"hostPID": True}}), "environment.pod_spec.spec.hostPID"),
    "hostIPC": (pod({"spec": {"hostIPC": True}}), "environment.pod_spec.spec.hostIPC"),
    "hostPath volume": (
        pod({"spec": {"volumes": [{"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}]}}),
        "environment.pod_spec.spec.volumes[0].hostPath",
    ),
    "nodeName": (pod({"spec": {"nodeName": "gpu-node-1"}}), "environment.pod_spec.spec.nodeName"),
    "serviceAccountName": (
        pod({"spec": {"serviceAccountName": "cluster-admin"}}),
        "environment.pod_spec.spec.serviceAccountName",
    ),
    "another team's claim": (
        pod({"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "team-b"}}]}}),
        "environment.pod_spec.spec.volumes[0].persistentVolumeClaim",
    ),
    "nfs volume": (
        pod({"spec": {"volumes": [{"name": "d", "nfs": {"server": "nfs.internal", "path": "/"}}]}}),
        "environment.pod_spec.spec.volumes[0].nfs",
    ),
    "envFrom a ConfigMap": (
        pod({"spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "team-b"}}]}]}}),
        "environment.pod_spec.spec.containers[0].envFrom[0].configMapRef",
    ),
    "supplementalGroups": (
        pod({"spec": {"securityContext": {"supplementalGroups": [1001]}}}),
        "environment.pod_spec.spec.securityContext.supplementalGroups",
    ),
    "tolerations": (
        pod({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        "environment.pod_spec.spec.tolerations",
    ),
    "pod namespace kube-system": (
        pod({"metadata": {"namespace": "kube-system"}}),
        "environment.pod_spec.metadata.namespace",
    ),
    "namespace kube-system": (
        config(airflow={"trial_runner": "kubernetes", "namespace": "kube-system"}),
        "airflow.namespace",
    ),
    "other kubernetes_conn_id": (
        config(airflow={"trial_runner": "kubernetes", "kubernetes_conn_id": "prod_cluster"}),
        "airflow.kubernetes_conn_id",
    ),
}


@pytest.mark.parametrize(("yaml_text", "field"), FORBIDDEN.values(), ids=list(FORBIDDEN))
def test_each_forbidden_field_is_refused_at_submission_naming_it(
    creator: Creator, yaml_text: str, field: str
) -> None:
    response = creator.create(config=yaml_text)

    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert f"{field}: " in detail
    if field != "checkpoint_storage.storage_path":
        assert REFUSED in detail
    assert creator.count() == 0


def test_the_whole_attack_of_the_review_is_refused_in_one_answer(creator: Creator) -> None:
    yaml_text = docker(
        bind_mounts=[
            {"host_path": AIRFLOW_HOME, "container_path": "/host_airflow"},
            {"host_path": "/etc", "container_path": "/host_etc"},
        ],
        environment={"add_capabilities": ["SYS_ADMIN", "NET_ADMIN"]},
        resources={"devices": ["/dev/sda:/dev/sda"]},
    )
    response = creator.create(config=yaml_text)

    assert response.status_code == 400
    lines = response.json()["detail"]
    for field in (
        "bind_mounts[0].host_path",
        "bind_mounts[1].host_path",
        "environment.add_capabilities[0]",
        "environment.add_capabilities[1]",
        "resources.devices[0].host_path",
    ):
        assert f"{field}: " in lines
    assert creator.count() == 0


def test_the_default_storage_and_a_plain_container_pass(creator: Creator) -> None:
    for yaml_text in (config(), docker(), pod({"spec": {"nodeSelector": {"gpu": "a100"}}})):
        response = creator.create(config=yaml_text)
        assert response.status_code == 200, response.text
    assert creator.count() == 3


def test_storage_under_the_checkpoint_root_passes(creator: Creator, people: People) -> None:
    yaml_text = config(checkpoint_storage={"type": "shared_fs", "host_path": str(people.storage / "team-a")})
    assert creator.create(config=yaml_text).status_code == 200


def test_a_folder_beside_the_root_sharing_its_name_is_not_inside_it(creator: Creator, people: People) -> None:
    evil = f"{people.storage}-evil"
    response = creator.create(config=config(checkpoint_storage={"type": "shared_fs", "host_path": evil}))
    assert response.status_code == 400
    assert "checkpoint_storage.host_path: " in response.json()["detail"]


def test_a_pool_policy_allows_what_it_names_for_that_pool_only(
    creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW__DET__POOL_POLICIES",
        json.dumps(
            {"default_pool": {"allowed_capabilities": ["SYS_PTRACE"], "allowed_pod_fields": ["hostIPC"]}}
        ),
    )
    assert creator.create(config=docker(environment={"add_capabilities": ["SYS_PTRACE"]})).status_code == 200
    assert creator.create(config=pod({"spec": {"hostIPC": True}})).status_code == 200
    # What the pool does not name stays refused, and its message says where an admin may allow it.
    refused = creator.create(config=docker(environment={"add_capabilities": ["SYS_ADMIN"]}))
    assert refused.status_code == 400
    assert "for pool 'default_pool' in [det] pool_policies" in refused.json()["detail"]


def test_allowed_host_paths_let_a_bind_mount_through(
    creator: Creator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__ALLOWED_HOST_PATHS", str(tmp_path / "datasets"))
    mount = {"host_path": str(tmp_path / "datasets" / "imagenet"), "container_path": "/data"}
    assert creator.create(config=docker(bind_mounts=[mount])).status_code == 200


def test_an_unmanaged_experiment_may_not_keep_checkpoints_outside_the_allowed_folders(people: People) -> None:
    body = {"config": {"name": "nb", "checkpoint_storage": {"type": "shared_fs", "host_path": "/etc"}}}
    response = people.call("alice", "POST", "/experiments/unmanaged", json=body)
    assert response.status_code == 400
    assert "checkpoint_storage.host_path: host path '/etc' is not allowed" in response.json()["detail"]
    assert people.call("admin", "GET", "/experiments").json()["experiments"] == []
