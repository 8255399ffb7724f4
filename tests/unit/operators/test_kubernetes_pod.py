"""The pod a Kubernetes trial would be submitted as: every field against what the user configured,
through the kubernetes client's models and the provider's serializer (no cluster needed)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

from det_airflow import settings
from det_airflow.config import config_to_dict, parse_config
from det_airflow.object_storage import CREDENTIAL_VARIABLES
from det_airflow.operators.runners import LABEL_EXPERIMENT, LABEL_RUN, LABEL_TRIAL, ContainerTrial
from det_airflow.operators.runners.kubernetes import KubernetesRunner
from det_airflow.operators.runners.kubernetes_pod import (
    CONFIG_VARIABLE,
    SECRET_VARIABLES,
    TRIAL_CONTAINER,
    gang_job,
    gang_service,
    priority_class,
    secret_name,
    trial_pod,
    trial_secret,
)
from det_airflow.runner_policy import PolicyError
from det_airflow.settings import RunnerPolicy
from det_airflow.trial_env import SESSION_TOKEN
from det_airflow.trial_process import TrialSpec

MINIMAL = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
}
# The run's Secret, as secret_name would name it.
SECRET = "det-trial-3-12-2-0a1b2c3d"


def pod_dict(
    tmp_path: Path,
    *,
    device: str = "cpu",
    slots: tuple[int, ...] = (),
    policy: RunnerPolicy | None = None,
    uid: int | None = None,
    env: dict[str, str] | None = None,
    **changes: Any,
) -> dict[str, Any]:
    trial = make_trial(tmp_path, device=device, slots=slots, uid=uid, env=env, **changes)
    return dict(PodGenerator.serialize_pod(trial_pod(trial, namespace="ml", secret=SECRET, policy=policy)))


def make_trial(
    tmp_path: Path,
    *,
    device: str = "cpu",
    slots: tuple[int, ...] = (),
    uid: int | None = None,
    env: dict[str, str] | None = None,
    **changes: Any,
) -> ContainerTrial:
    config = config_to_dict(parse_config({**MINIMAL, **changes}))
    spec = TrialSpec(
        trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2, uid=uid, gid=uid
    )
    return ContainerTrial(
        spec=spec, workdir=tmp_path, argv=(sys.executable, "train.py"), env=env or {"DET_TRIAL_ID": "12"},
        slot_ids=slots, device=device,
    )  # fmt: skip


def test_trial_pod_fields(tmp_path: Path) -> None:
    pod = pod_dict(
        tmp_path,
        environment={"image": "my/train:1", "force_pull_image": True, "add_capabilities": ["SYS_PTRACE"]},
        resources={"shm_size": "2G", "priority": 10},
        checkpoint_storage={"type": "shared_fs", "host_path": "/ckpt"},
        bind_mounts=[
            {"host_path": "/data", "container_path": "/data", "read_only": True, "propagation": "rslave"}
        ],
        policy=RunnerPolicy(allowed_capabilities=("SYS_PTRACE",)),
    )

    assert pod["metadata"] == {
        "name": "det-trial-3-12-2",
        "namespace": "ml",
        "labels": {LABEL_EXPERIMENT: "3", LABEL_TRIAL: "12", LABEL_RUN: "2"},
    }
    spec = pod["spec"]
    assert (spec["restartPolicy"], spec["priorityClassName"]) == ("Never", "det-priority-10")
    (container,) = spec["containers"]
    assert container["name"] == TRIAL_CONTAINER
    assert (container["image"], container["imagePullPolicy"]) == ("my/train:1", "Always")
    assert container["command"] == ["python3", "train.py"]
    assert container["workingDir"] == str(tmp_path)
    assert {"name": "DET_TRIAL_ID", "value": "12"} in container["env"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["SYS_PTRACE"], "drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsGroup": 65534,
        "runAsNonRoot": True,
        "runAsUser": 65534,
    }
    assert "limits" not in container["resources"]  # a CPU trial asks for no GPU
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert volumes["det-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(2 * 1024**3)}
    assert mounts["det-shm"]["mountPath"] == "/dev/shm"
    assert volumes["det-checkpoints"]["hostPath"] == {"path": "/ckpt"}
    assert mounts["det-checkpoints"]["mountPath"] == "/ckpt"
    assert volumes["det-bind-0"]["hostPath"] == {"path": "/data"}
    assert mounts["det-bind-0"] == {
        "name": "det-bind-0", "mountPath": "/data", "readOnly": True, "mountPropagation": "HostToContainer",
    }  # fmt: skip
    assert mounts["det-workdir"]["mountPath"] == str(tmp_path)


def test_gpu_limits_are_the_slots_of_the_pod(tmp_path: Path) -> None:
    (container,) = pod_dict(tmp_path, device="cuda", slots=(0, 1, 2, 3))["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}


def test_pod_spec_is_merged_as_determined_does(tmp_path: Path) -> None:
    pod_spec = {
        "metadata": {"labels": {"team": "vision"}},
        "spec": {
            "serviceAccountName": "trainer",
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
            "containers": [
                {"name": "log-forwarder", "image": "fluent/fluent-bit"},
                {
                    "name": TRIAL_CONTAINER,
                    "image": "ignored/by-ours",
                    "env": [{"name": "FROM_POD_SPEC", "value": "1"}],
                    "volumeMounts": [{"name": "datasets", "mountPath": "/datasets"}],
                },
            ],
        },
    }
    pod = pod_dict(tmp_path, environment={"image": "my/train:1", "pod_spec": pod_spec})

    assert pod["metadata"]["labels"] == {
        "team": "vision",
        LABEL_EXPERIMENT: "3",
        LABEL_TRIAL: "12",
        LABEL_RUN: "2",
    }
    spec = pod["spec"]
    assert (spec["serviceAccountName"], spec["nodeSelector"]) == ("trainer", {"gpu": "a100"})
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert [c["name"] for c in spec["containers"]] == [TRIAL_CONTAINER, "log-forwarder"]
    trial_container = spec["containers"][0]
    assert trial_container["image"] == "my/train:1"
    assert {"name": "FROM_POD_SPEC", "value": "1"} in trial_container["env"]
    assert {"name": "DET_TRIAL_ID", "value": "12"} in trial_container["env"]
    assert {"name": "datasets", "mountPath": "/datasets"} in trial_container["volumeMounts"]
    assert {v["name"] for v in spec["volumes"]} >= {"datasets", "det-workdir", "det-shm"}


# --- what only the trial may read ---

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-secret"}
TOKEN = {SESSION_TOKEN: "trial-bearer-token"}
# Determined's own keys in the config, which the init container writes to the trial's config file.
KEYED_STORAGE = {"type": "s3", "bucket": "ckpt", "access_key": "AKIDCONFIGKEY", "secret_key": "config-secret"}


def reference(name: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": name}}}


def test_secrets_are_read_from_the_trials_secret_through_the_users_pod_spec(tmp_path: Path) -> None:
    pod_spec = {
        "spec": {
            "containers": [
                {"name": "log-forwarder", "image": "fluent/fluent-bit"},
                {"name": TRIAL_CONTAINER, "env": [{"name": "FROM_POD_SPEC", "value": "1"}]},
            ]
        }
    }
    env = {"DET_TRIAL_ID": "12", "AWS_DEFAULT_REGION": "eu-west-1", **CREDENTIALS, **TOKEN}
    pod = pod_dict(tmp_path, env=env, environment={"pod_spec": pod_spec}, checkpoint_storage=KEYED_STORAGE)

    secrets = [*CREDENTIALS.values(), *TOKEN.values(), KEYED_STORAGE["secret_key"]]
    assert not [v for v in secrets if v in json.dumps(pod)]
    trial_container, sidecar = pod["spec"]["containers"]
    assert {"name": "FROM_POD_SPEC", "value": "1"} in trial_container["env"]
    assert {"name": "AWS_DEFAULT_REGION", "value": "eu-west-1"} in trial_container["env"]
    for name in [*CREDENTIALS, SESSION_TOKEN]:
        assert reference(name) in trial_container["env"]
    assert CONFIG_VARIABLE not in {e["name"] for e in trial_container["env"]}, "it reads the config file"
    assert "env" not in sidecar, "the user's other containers get nothing of the trial's"
    (init,) = pod["spec"]["initContainers"]
    assert reference(SESSION_TOKEN) in init["env"] and reference(CONFIG_VARIABLE) in init["env"]
    assert not CREDENTIAL_VARIABLES & {e["name"] for e in init["env"]}, "it only fetches the context"


def test_the_trials_secret_holds_its_token_config_and_credentials_labelled_as_its_pod(
    tmp_path: Path,
) -> None:
    env = {"DET_TRIAL_ID": "12", "AWS_DEFAULT_REGION": "eu-west-1", **CREDENTIALS, **TOKEN}
    trial = make_trial(tmp_path, env=env, checkpoint_storage=KEYED_STORAGE)
    secret = PodGenerator.serialize_pod(trial_secret(trial, namespace="ml", name=SECRET))

    assert (secret["apiVersion"], secret["kind"], secret["type"]) == ("v1", "Secret", "Opaque")
    assert secret["metadata"] == {"name": SECRET, "namespace": "ml", "labels": trial.labels}
    data = secret["stringData"]
    assert set(data) == {*CREDENTIALS, SESSION_TOKEN, CONFIG_VARIABLE} <= SECRET_VARIABLES
    assert {k: data[k] for k in [*CREDENTIALS, *TOKEN]} == {**CREDENTIALS, **TOKEN}
    assert json.loads(data[CONFIG_VARIABLE]) == trial.config
    assert json.loads(data[CONFIG_VARIABLE])["checkpoint_storage"]["secret_key"] == "config-secret"
    assert secret["immutable"] is True


def test_a_trial_without_storage_credentials_still_has_a_secret_for_its_token_and_config(
    tmp_path: Path,
) -> None:
    trial = make_trial(tmp_path, env={"DET_TRIAL_ID": "12", **TOKEN})
    secret = trial_secret(trial, namespace="ml", name=SECRET)
    assert sorted(secret.string_data) == [CONFIG_VARIABLE, SESSION_TOKEN]


def test_a_runs_secret_is_named_after_its_pod_with_digits_no_one_can_guess(tmp_path: Path) -> None:
    trial = make_trial(tmp_path)
    names = {secret_name(trial) for _ in range(3)}
    assert len(names) == 3
    for name in names:
        assert re.fullmatch(r"det-trial-3-12-2-[0-9a-f]{8}", name)


def test_a_gangs_pods_read_the_token_and_credentials_from_the_secret(tmp_path: Path) -> None:
    trial = make_trial(tmp_path, env={"DET_TRIAL_ID": "12", **CREDENTIALS, **TOKEN}, slots=(0, 1))
    job = PodGenerator.serialize_pod(gang_job(trial, namespace="ml", pods=2, secret=SECRET))

    assert not [v for v in [*CREDENTIALS.values(), *TOKEN.values()] if v in json.dumps(job)]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert reference("AWS_SECRET_ACCESS_KEY") in container["env"]
    assert reference(SESSION_TOKEN) in container["env"]
    (init,) = job["spec"]["template"]["spec"]["initContainers"]
    assert reference(CONFIG_VARIABLE) in init["env"]


def test_priority_class_orders_as_determined_and_preempts_nothing() -> None:
    high, low = priority_class(1), priority_class(99)
    assert (high.metadata.name, high.value, high.preemption_policy) == ("det-priority-1", 99, "Never")
    assert low.value < high.value


@pytest.mark.kubernetes
def test_a_real_cluster_is_reachable() -> None:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("needs a Kubernetes cluster: KUBECONFIG is not set")
    from kubernetes import client, config

    config.load_kube_config()
    assert client.VersionApi().get_code().major


def test_a_multi_pod_trial_is_an_indexed_job_with_a_headless_service(tmp_path: Path) -> None:
    config = config_to_dict(parse_config({**MINIMAL, "resources": {"slots_per_trial": 8, "priority": 30}}))
    spec = TrialSpec(trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2)
    trial = ContainerTrial(
        spec=spec, workdir=tmp_path, argv=("python3", "train.py"), env={"DET_CONTAINER_RANK": "0"},
        slot_ids=(0, 1, 2, 3), device="cuda",
    )  # fmt: skip

    job = PodGenerator.serialize_pod(gang_job(trial, namespace="ml", pods=2, secret=SECRET))
    service = PodGenerator.serialize_pod(gang_service(trial, namespace="ml"))

    assert (job["kind"], job["metadata"]["name"]) == ("Job", "det-trial-3-12-2")
    assert {k: job["spec"][k] for k in ("completionMode", "completions", "parallelism", "backoffLimit")} == {
        "completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
    }  # fmt: skip
    pod_spec = job["spec"]["template"]["spec"]
    assert (pod_spec["subdomain"], pod_spec["priorityClassName"]) == ("det-trial-3-12-2", "det-priority-30")
    (container,) = pod_spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}  # the slots of one pod
    env = {e["name"]: e for e in container["env"]}
    assert json.loads(env["DET_CONTAINER_ADDRS"]["value"]) == [
        "det-trial-3-12-2-0.det-trial-3-12-2",
        "det-trial-3-12-2-1.det-trial-3-12-2",
    ]
    assert env["DET_CHIEF_IP"]["value"] == "det-trial-3-12-2-0.det-trial-3-12-2"
    rank_source = env["DET_CONTAINER_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert rank_source == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert job["spec"]["template"]["metadata"]["labels"][LABEL_TRIAL] == "12"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"job-name": "det-trial-3-12-2"}


# --- the platform's security fields ---


def test_a_pod_runs_as_the_owners_uid_unprivileged_on_a_read_only_root(tmp_path: Path) -> None:
    pod = pod_dict(tmp_path, uid=61300)
    spec = pod["spec"]

    assert spec["securityContext"] == {
        "fsGroup": 61300,
        "runAsGroup": 61300,
        "runAsNonRoot": True,
        "runAsUser": 61300,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["automountServiceAccountToken"] is False
    assert {"name": "det-tmp", "emptyDir": {}} in spec["volumes"]
    for container in [*spec["initContainers"], *spec["containers"]]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsGroup": 61300,
            "runAsNonRoot": True,
            "runAsUser": 61300,
        }
        assert {"name": "det-tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_the_platforms_fields_win_over_the_users_pod_spec(tmp_path: Path) -> None:
    pod_spec = {
        "spec": {
            "securityContext": {"runAsUser": 1234, "fsGroup": 1234},
            "containers": [
                {"name": "sidecar", "image": "fluent/fluent-bit", "securityContext": {"runAsUser": 4321}},
                {"name": TRIAL_CONTAINER, "securityContext": {"readOnlyRootFilesystem": False}},
            ],
        }
    }
    spec = pod_dict(tmp_path, uid=61300, environment={"pod_spec": pod_spec})["spec"]

    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["fsGroup"]) == (61300, 61300)
    for container in spec["containers"]:
        context = container["securityContext"]
        assert (context["runAsUser"], context["readOnlyRootFilesystem"]) == (61300, True)
        assert context["capabilities"] == {"drop": ["ALL"]}


def test_a_pool_that_allows_root_and_a_writable_root_keeps_the_images_user(tmp_path: Path) -> None:
    spec = pod_dict(tmp_path, uid=61300, policy=RunnerPolicy(allow_root=True, read_only_root=False))["spec"]
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_kubernetes_runner_refuses_a_forbidden_pod_spec_before_creating_anything(tmp_path: Path) -> None:
    config = config_to_dict(
        parse_config(
            {
                **MINIMAL,
                "airflow": {"trial_runner": "kubernetes"},
                "environment": {"pod_spec": {"spec": {"hostPID": True, "nodeName": "n1"}}},
            }
        )
    )
    spec = TrialSpec(trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2)
    trial = ContainerTrial(spec=spec, workdir=tmp_path, argv=("python3", "train.py"), env={})
    # No cluster at all: the refusal comes before any call to one.
    runner = KubernetesRunner(None, namespace="default", settings=settings.load({}))  # type: ignore[arg-type]
    with pytest.raises(PolicyError) as refused:
        runner.submit(trial)
    assert [path for path, _ in refused.value.problems] == [
        "environment.pod_spec.spec.hostPID",
        "environment.pod_spec.spec.nodeName",
    ]
    assert "not allowed by the cluster's runner policy" in str(refused.value)


def test_the_kubernetes_runner_refuses_a_namespace_outside_the_policy(tmp_path: Path) -> None:
    config = config_to_dict(parse_config({**MINIMAL, "airflow": {"trial_runner": "kubernetes"}}))
    spec = TrialSpec(trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2)
    trial = ContainerTrial(spec=spec, workdir=tmp_path, argv=("python3", "train.py"), env={})
    runner = KubernetesRunner(None, namespace="kube-system", settings=settings.load({}))  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match=r"airflow.namespace: namespace 'kube-system' is not allowed"):
        runner.submit(trial)


def kubernetes_trial(tmp_path: Path, pod_spec: dict[str, Any], env: dict[str, str]) -> ContainerTrial:
    config = config_to_dict(
        parse_config(
            {**MINIMAL, "airflow": {"trial_runner": "kubernetes"}, "environment": {"pod_spec": pod_spec}}
        )
    )
    spec = TrialSpec(trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2)
    return ContainerTrial(spec=spec, workdir=tmp_path, argv=("python3", "train.py"), env=env)


def test_the_kubernetes_runner_refuses_a_pod_spec_that_names_a_secret(tmp_path: Path) -> None:
    volume = {"name": "stolen", "secret": {"secretName": "det-trial-3-11-1", "optional": True}}
    trial = kubernetes_trial(tmp_path, {"spec": {"volumes": [volume]}}, env={})
    runner = KubernetesRunner(None, namespace="default", settings=settings.load({}))  # type: ignore[arg-type]
    with pytest.raises(PolicyError) as refused:
        runner.submit(trial)
    assert refused.value.problems == [
        (
            "environment.pod_spec.spec.volumes[0].secret",
            "Secret 'det-trial-3-11-1' is not allowed by the cluster's runner policy (a pod spec may name "
            "the Secrets of allowed_secrets, or any with 'secrets' in allowed_pod_fields; an admin may allow "
            "it in airflow.cfg [det] allowed_secrets, or for pool 'default_pool' in [det] pool_policies)",
        )
    ]


def test_the_runners_own_secret_references_come_after_the_policy_and_pass_it(tmp_path: Path) -> None:
    pod_spec = {"spec": {"containers": [{"name": TRIAL_CONTAINER, "env": [{"name": "A", "value": "1"}]}]}}
    trial = kubernetes_trial(tmp_path, pod_spec, env={"DET_TRIAL_ID": "12", **CREDENTIALS, **TOKEN})
    runner = KubernetesRunner(None, namespace="default", settings=settings.load({}))  # type: ignore[arg-type]

    workload = runner.workload(trial)

    secret, pod = workload.objects
    assert secret.metadata.name == workload.secret
    (container,) = PodGenerator.serialize_pod(pod)["spec"]["containers"]
    for name in [*CREDENTIALS, SESSION_TOKEN]:
        ref = {"name": name, "valueFrom": {"secretKeyRef": {"name": workload.secret, "key": name}}}
        assert ref in container["env"]


# --- the pod spec's volumes, variable sources and security fields: an allow-list ---

# Every volume type through which another team's claims, the node's or the cloud's storage, or a
# Secret of the namespace would reach the pod: (the volume as the pod spec gives it, its type).
REFUSED_VOLUMES: list[tuple[dict[str, Any], str]] = [
    ({"persistentVolumeClaim": {"claimName": "team-b-datasets"}}, "persistentVolumeClaim"),
    ({"nfs": {"server": "nfs.internal", "path": "/exports/team-b"}}, "nfs"),
    ({"csi": {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": "team-b"}}}, "csi"),
    ({"azureFile": {"secretName": "team-b-storage", "shareName": "models"}}, "azureFile"),
    ({"gitRepo": {"repository": "https://git.internal/team-b/code.git"}}, "gitRepo"),
    ({"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.2024-01.internal:disk", "lun": 0}}, "iscsi"),
    ({"hostPath": {"path": "/var/run/docker.sock"}}, "hostPath"),
    ({"cephfs": {"monitors": ["10.0.0.1:6789"], "secretRef": {"name": "ceph"}}}, "cephfs"),
    ({"ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}}, "ephemeral"),
]


def volume_trial(tmp_path: Path, *volumes: dict[str, Any], **spec: Any) -> ContainerTrial:
    pod_spec = {
        "spec": {
            "volumes": [{"name": f"v{i}", **v} for i, v in enumerate(volumes)],
            "containers": [
                {
                    "name": TRIAL_CONTAINER,
                    "volumeMounts": [{"name": f"v{i}", "mountPath": f"/v{i}"} for i in range(len(volumes))],
                }
            ],
            **spec,
        }
    }
    return kubernetes_trial(tmp_path, pod_spec, env={"DET_TRIAL_ID": "12"})


def rendered(runner: KubernetesRunner, trial: ContainerTrial) -> dict[str, Any]:
    """The pod as the runner would send it to the API server."""
    _, pod = runner.workload(trial).objects
    return dict(PodGenerator.serialize_pod(pod))


@pytest.mark.parametrize(("volume", "kind"), REFUSED_VOLUMES, ids=[kind for _, kind in REFUSED_VOLUMES])
def test_the_runner_refuses_each_volume_type_the_policy_does_not_name(
    tmp_path: Path, volume: dict[str, Any], kind: str
) -> None:
    trial = volume_trial(tmp_path, {"emptyDir": {}}, volume)
    runner = KubernetesRunner(None, namespace="default", settings=settings.load({}))  # type: ignore[arg-type]
    with pytest.raises(PolicyError) as refused:
        runner.workload(trial)
    assert refused.value.problems == [
        (
            f"environment.pod_spec.spec.volumes[1].{kind}",
            f"volume type {kind} is not allowed by the cluster's runner policy (an admin may allow it in "
            "airflow.cfg [det] allowed_volume_types, or for pool 'default_pool' in [det] pool_policies)",
        )
    ]


def test_the_pods_own_volume_types_pass_and_reach_the_pod(tmp_path: Path) -> None:
    trial = volume_trial(
        tmp_path,
        {"emptyDir": {"medium": "Memory"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"projected": {"sources": [{"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}},
    )  # fmt: skip
    runner = KubernetesRunner(None, namespace="default", settings=settings.load({}))  # type: ignore[arg-type]

    pod = rendered(runner, trial)

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["v0"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["v1"]["downwardAPI"]["items"][0]["path"] == "labels"
    assert volumes["v2"]["projected"]["sources"][0]["downwardAPI"]["items"][0]["path"] == "name"


def test_what_the_admin_names_passes_and_reaches_the_pod(tmp_path: Path) -> None:
    trial = volume_trial(
        tmp_path,
        {"persistentVolumeClaim": {"claimName": "team-a-datasets", "readOnly": True}},
        {"nfs": {"server": "nfs.internal", "path": "/exports/team-a"}},
        {"configMap": {"name": "team-a-settings"}},
        {"secret": {"secretName": "team-a-keys"}},
        imagePullSecrets=[{"name": "team-a-registry"}],
    )
    admin = settings.load(
        {
            "pool_policies": json.dumps(
                {
                    "default_pool": {
                        "allowed_volume_types": ["persistentVolumeClaim", "nfs"],
                        "allowed_config_maps": ["team-a-*"],
                        "allowed_secrets": ["team-a-*"],
                    }
                }
            )
        }
    )
    runner = KubernetesRunner(None, namespace="default", settings=admin)  # type: ignore[arg-type]

    pod = rendered(runner, trial)

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["v0"]["persistentVolumeClaim"] == {"claimName": "team-a-datasets", "readOnly": True}
    assert volumes["v1"]["nfs"] == {"server": "nfs.internal", "path": "/exports/team-a"}
    assert volumes["v2"]["configMap"] == {"name": "team-a-settings"}
    assert volumes["v3"]["secret"] == {"secretName": "team-a-keys"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "team-a-registry"}]
    # Another pool's policy names none of them.
    other = kubernetes_trial(
        tmp_path, {"spec": {"volumes": [{"name": "d", "nfs": {"server": "n", "path": "/"}}]}}, env={}
    )
    other_config = {**other.config, "resources": {**other.config["resources"], "resource_pool": "team-b"}}
    other = ContainerTrial(
        spec=dataclasses.replace(other.spec, config=other_config), workdir=tmp_path, argv=other.argv, env={}
    )
    with pytest.raises(PolicyError, match=r"volumes\[0\]\.nfs: volume type nfs is not allowed"):
        runner.workload(other)


def test_the_runner_refuses_variables_from_config_maps_and_other_groups(tmp_path: Path) -> None:
    pod_spec = {
        "spec": {
            "securityContext": {"supplementalGroups": [1001]},
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
            "runtimeClassName": "unsandboxed",
            "containers": [
                {
                    "name": TRIAL_CONTAINER,
                    "envFrom": [{"configMapRef": {"name": "team-b-settings"}}],
                    "securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                }
            ],
        }
    }
    trial = kubernetes_trial(tmp_path, pod_spec, env={})
    runner = KubernetesRunner(None, namespace="default", settings=settings.load({}))  # type: ignore[arg-type]
    with pytest.raises(PolicyError) as refused:
        runner.workload(trial)
    assert [path for path, _ in refused.value.problems] == [
        "environment.pod_spec.spec.securityContext.supplementalGroups",
        "environment.pod_spec.spec.tolerations",
        "environment.pod_spec.spec.runtimeClassName",
        "environment.pod_spec.spec.containers[0].securityContext.appArmorProfile.type",
        "environment.pod_spec.spec.containers[0].envFrom[0].configMapRef",
    ]


def test_a_storage_folder_under_an_allowed_folder_is_mounted_through_that_folder(tmp_path: Path) -> None:
    """The kubelet follows links in a hostPath when the pod starts: a trial's own storage_path
    folder, which it could swap for a link to the node's /, is reached through the admin's folder,
    where such a link resolves inside the pod."""
    storage = {"type": "shared_fs", "host_path": "/srv/ckpt", "storage_path": "team-a/runs"}
    config = config_to_dict(
        parse_config({**MINIMAL, "airflow": {"trial_runner": "kubernetes"}, "checkpoint_storage": storage})
    )
    spec = TrialSpec(trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2)
    trial = ContainerTrial(spec=spec, workdir=tmp_path, argv=("python3", "train.py"), env={})
    cluster = settings.load({"checkpoint_storage_path": "/srv/ckpt"})
    runner = KubernetesRunner(None, namespace="default", settings=cluster)  # type: ignore[arg-type]

    pod = rendered(runner, trial)

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (container,) = pod["spec"]["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert volumes["det-checkpoints"]["hostPath"] == {"path": "/srv/ckpt"}
    assert mounts["det-checkpoints"]["mountPath"] == "/srv/ckpt"  # the trial writes /srv/ckpt/team-a/runs
