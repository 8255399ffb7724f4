"""runner_policy.check: every field a config asks of its runner, judged against the admin's policy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from det_airflow import settings
from det_airflow.config import config_to_dict, parse_config
from det_airflow.runner_policy import check, inside

BASE: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
}
CLUSTER = settings.load({"checkpoint_storage_path": "/x/ckpt", "trial_work_dir": "/x/trials"})


def fields(config: dict[str, Any], cluster: settings.Settings = CLUSTER, **options: Any) -> list[str]:
    normalized = config_to_dict(parse_config({**BASE, **config}))
    return [path for path, _ in check(normalized, cluster, **options)]


def test_a_sibling_folder_sharing_the_roots_name_is_not_inside_it() -> None:
    assert not inside("/x/ckpt-evil", "/x/ckpt")
    assert inside("/x/ckpt/team/../team-a", "/x/ckpt") and inside("/x/ckpt", "/x/ckpt")
    assert not inside("/x/ckpt/../etc", "/x/ckpt")
    storage = {"type": "shared_fs", "host_path": "/x/ckpt-evil"}
    assert fields({"checkpoint_storage": storage}) == ["checkpoint_storage.host_path"]


def test_the_checkpoint_root_and_folders_under_it_pass() -> None:
    assert fields({"checkpoint_storage": {"type": "shared_fs", "host_path": "/x/ckpt"}}) == []
    storage = {"type": "shared_fs", "host_path": "/x/ckpt", "storage_path": "team-a/runs"}
    assert fields({"checkpoint_storage": storage}) == []


@pytest.mark.parametrize("storage_path", ["../elsewhere", "a/../../b"])
def test_storage_path_may_not_climb_out_of_host_path(storage_path: str) -> None:
    storage = {"type": "shared_fs", "host_path": "/x/ckpt", "storage_path": storage_path}
    assert fields({"checkpoint_storage": storage}) == ["checkpoint_storage.storage_path"]


def test_host_path_and_storage_path_together_must_lie_under_a_root() -> None:
    storage = {"type": "shared_fs", "host_path": "/x", "storage_path": "ckpt/runs"}
    assert fields({"checkpoint_storage": storage}) == []  # /x/ckpt/runs: what is mounted and written
    storage = {"type": "shared_fs", "host_path": "/x", "storage_path": "other"}
    assert fields({"checkpoint_storage": storage}) == ["checkpoint_storage.host_path"]


def test_host_paths_are_judged_as_written_and_links_where_they_are_mounted(tmp_path: Path) -> None:
    """The master cannot see a worker's folders: it judges the name. The Docker runner walks the
    path on its host before the mount (tests/unit/operators/test_host_mounts.py)."""
    (tmp_path / "escape").symlink_to("/etc")
    cluster = settings.load({"checkpoint_storage_path": str(tmp_path)})
    config = {"airflow": {"trial_runner": "docker"}}
    mount = [{"host_path": str(tmp_path / "escape"), "container_path": "/x"}]
    assert fields({**config, "bind_mounts": mount}, cluster) == []
    outside = [{"host_path": str(tmp_path / "escape" / ".." / ".."), "container_path": "/x"}]
    assert fields({**config, "bind_mounts": outside}, cluster) == ["bind_mounts[0].host_path"]


def test_container_fields_are_judged_for_container_runners_only() -> None:
    asks = {
        "bind_mounts": [{"host_path": "/etc", "container_path": "/etc"}],
        "environment": {"add_capabilities": ["SYS_ADMIN"], "image": "evil/miner:1"},
        "resources": {"devices": ["/dev/mem:/dev/mem"]},
    }
    strict = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_images": "registry.example/*"})
    assert fields(asks, strict) == []  # a local trial gets none of them
    assert fields({**asks, "airflow": {"trial_runner": "docker"}}, strict) == [
        "bind_mounts[0].host_path",
        "environment.add_capabilities[0]",
        "resources.devices[0].host_path",
        "environment.image.cpu",
    ]


def test_what_the_admin_allows_passes() -> None:
    cluster = settings.load(
        {
            "checkpoint_storage_path": "/x/ckpt",
            "allowed_host_paths": "/data",
            "allowed_capabilities": "CAP_SYS_PTRACE",
            "allowed_devices": "/dev/fuse",
            "allowed_images": "registry.example/*",
            "allowed_conn_ids": "docker_gpu",
        }
    )
    config = {
        "airflow": {"trial_runner": "docker", "docker_conn_id": "docker_gpu"},
        "bind_mounts": [{"host_path": "/data/imagenet", "container_path": "/data"}],
        "environment": {"add_capabilities": ["sys_ptrace"], "image": "registry.example/ml:1"},
        "resources": {"devices": ["/dev/fuse:/dev/fuse"]},
    }
    assert fields(config, cluster) == []
    assert fields({**config, "airflow": {"trial_runner": "docker", "docker_conn_id": "other"}}, cluster) == [
        "airflow.docker_conn_id"
    ]


def test_s3_storage_names_only_a_connection_the_platform_gives_out() -> None:
    """Its connection's credentials reach the trial: another user's connection is refused."""
    cluster = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_conn_ids": "s3_team_a"})
    storage = {"type": "s3", "bucket": "ckpt"}
    assert fields({"checkpoint_storage": storage}, cluster) == []
    assert fields({"checkpoint_storage": {**storage, "aws_conn_id": "aws_default"}}, cluster) == []
    assert fields({"checkpoint_storage": {**storage, "aws_conn_id": "s3_team_a"}}, cluster) == []
    assert fields({"checkpoint_storage": {**storage, "aws_conn_id": "aws_admin"}}, cluster) == [
        "checkpoint_storage.aws_conn_id"
    ]


def test_an_s3_endpoint_must_be_one_the_admin_lists() -> None:
    """The master requests the endpoint and streams its answers back: not any address."""
    cluster = settings.load(
        {"checkpoint_storage_path": "/x/ckpt", "allowed_storage_endpoints": "http://minio.internal:9000/"}
    )
    storage = {"type": "s3", "bucket": "ckpt"}
    assert (
        fields({"checkpoint_storage": {**storage, "endpoint_url": "http://minio.internal:9000"}}, cluster)
        == []
    )
    assert fields({"checkpoint_storage": {**storage, "endpoint_url": "http://169.254.169.254"}}, cluster) == [
        "checkpoint_storage.endpoint_url"
    ]
    assert fields({"checkpoint_storage": {**storage, "endpoint_url": "http://minio.internal:9000"}}) == [
        "checkpoint_storage.endpoint_url"
    ]


def kubernetes(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"airflow": {"trial_runner": "kubernetes"}, "environment": {"pod_spec": pod_spec}}


def in_container(context: dict[str, Any], key: str = "containers") -> dict[str, Any]:
    return {"spec": {key: [{"name": "c", "securityContext": context}]}}


# Every way a pod spec can read one of its namespace's Secrets (another trial's token and keys):
# (pod_spec, the refused field's path, the Secret it names).
SECRET_REFERENCES: list[tuple[dict[str, Any], str, str | None]] = [
    (
        {"spec": {"volumes": [{"name": "s", "secret": {"secretName": "det-trial-1-2-3", "optional": True}}]}},
        "spec.volumes[0].secret",
        "det-trial-1-2-3",
    ),
    (
        {
            "spec": {
                "volumes": [
                    {"name": "scratch", "emptyDir": {}},
                    {
                        "name": "p",
                        "projected": {
                            "sources": [
                                {"downwardAPI": {"items": [{"path": "labels"}]}},
                                {"secret": {"name": "det-trial-1-2-3"}},
                            ]
                        },
                    },
                ]
            }
        },
        "spec.volumes[1].projected.sources[1].secret",
        "det-trial-1-2-3",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "env": [
                            {"name": "A", "value": "1"},
                            {
                                "name": "T",
                                "valueFrom": {"secretKeyRef": {"name": "det-trial-1-2-3", "key": "K"}},
                            },
                        ],
                    }
                ]
            }
        },
        "spec.containers[0].env[1].valueFrom.secretKeyRef",
        "det-trial-1-2-3",
    ),
    (
        {
            "spec": {
                "initContainers": [{"name": "c", "envFrom": [{"secretRef": {"name": "det-trial-1-2-3"}}]}]
            }
        },
        "spec.initContainers[0].envFrom[0].secretRef",
        "det-trial-1-2-3",
    ),
    (  # the client models' spelling counts too
        {"spec": {"containers": [{"name": "c", "env_from": [{"secret_ref": {"name": "det-trial-1-2-3"}}]}]}},
        "spec.containers[0].envFrom[0].secretRef",
        "det-trial-1-2-3",
    ),
    (
        {
            "spec": {
                "ephemeralContainers": [
                    {"name": "c", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {}}}]}
                ]
            }
        },
        "spec.ephemeralContainers[0].env[0].valueFrom.secretKeyRef",
        None,
    ),
]

POD_FIELDS = [
    (in_container({"privileged": True}), "spec.containers[0].securityContext.privileged"),
    (
        in_container({"allowPrivilegeEscalation": True}),
        "spec.containers[0].securityContext.allowPrivilegeEscalation",
    ),
    (in_container({"runAsUser": 0}, "initContainers"), "spec.initContainers[0].securityContext.runAsUser"),
    (in_container({"runAsNonRoot": False}), "spec.containers[0].securityContext.runAsNonRoot"),
    (in_container({"runAsGroup": 0}), "spec.containers[0].securityContext.runAsGroup"),
    (
        in_container({"capabilities": {"add": ["SYS_ADMIN"]}}),
        "spec.containers[0].securityContext.capabilities.add[0]",
    ),
    (in_container({"procMount": "Unmasked"}), "spec.containers[0].securityContext.procMount"),
    (
        in_container({"seccompProfile": {"type": "Unconfined"}}),
        "spec.containers[0].securityContext.seccompProfile.type",
    ),
    ({"spec": {"securityContext": {"runAsUser": 0}}}, "spec.securityContext.runAsUser"),
    ({"spec": {"hostNetwork": True}}, "spec.hostNetwork"),
    ({"spec": {"hostPID": True}}, "spec.hostPID"),
    ({"spec": {"hostIPC": True}}, "spec.hostIPC"),
    ({"spec": {"host_pid": True}}, "spec.hostPID"),  # the client models' spelling counts too
    ({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "spec.volumes[0].hostPath"),
    (
        {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}},
        "spec.containers[0].ports[0].hostPort",
    ),
    ({"spec": {"nodeName": "node-1"}}, "spec.nodeName"),
    ({"spec": {"serviceAccountName": "admin"}}, "spec.serviceAccountName"),
    ({"spec": {"serviceAccount": "admin"}}, "spec.serviceAccount"),
    ({"spec": {"automountServiceAccountToken": True}}, "spec.automountServiceAccountToken"),
    (
        {
            "spec": {
                "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]
            }
        },
        "spec.volumes[0].projected.sources[0].serviceAccountToken",
    ),
    ({"metadata": {"namespace": "kube-system"}}, "metadata.namespace"),
    *[(pod_spec, path) for pod_spec, path, _ in SECRET_REFERENCES],
]


@pytest.mark.parametrize(("pod_spec", "path"), POD_FIELDS, ids=[p for _, p in POD_FIELDS])
def test_every_guarded_pod_field_is_refused_by_its_path(pod_spec: dict[str, Any], path: str) -> None:
    assert fields(kubernetes(pod_spec)) == [f"environment.pod_spec.{path}"]


def test_a_projected_service_account_token_needs_an_allowed_service_account() -> None:
    cluster = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_service_accounts": "trainer"})
    volume = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}
    assert fields(kubernetes({"spec": {"serviceAccountName": "trainer", "volumes": [volume]}}), cluster) == []


def test_a_pool_policy_allows_a_pod_field_for_its_pool_only() -> None:
    cluster = settings.load(
        {
            "checkpoint_storage_path": "/x/ckpt",
            "pool_policies": '{"gpu": {"allowed_pod_fields": ["hostIPC"], "allowed_service_accounts": ["trainer"]}}',
        }
    )
    pod_spec = {
        "spec": {"hostIPC": True, "serviceAccountName": "trainer", "automountServiceAccountToken": True}
    }
    assert fields({**kubernetes(pod_spec), "resources": {"resource_pool": "gpu"}}, cluster) == []
    assert fields(kubernetes(pod_spec), cluster) == [
        "environment.pod_spec.spec.hostIPC",
        "environment.pod_spec.spec.serviceAccountName",
        "environment.pod_spec.spec.automountServiceAccountToken",
    ]


@pytest.mark.parametrize(
    ("pod_spec", "path", "secret"), SECRET_REFERENCES, ids=[p for _, p, _ in SECRET_REFERENCES]
)
def test_a_pod_spec_naming_a_secret_is_refused_saying_which_setting_allows_it(
    pod_spec: dict[str, Any], path: str, secret: str | None
) -> None:
    normalized = config_to_dict(parse_config({**BASE, **kubernetes(pod_spec)}))
    subject = f"Secret {secret!r}" if secret else "a Secret"
    assert check(normalized, CLUSTER) == [
        (
            f"environment.pod_spec.{path}",
            f"{subject} is not allowed by the cluster's runner policy (a pod spec may name the Secrets of "
            "allowed_secrets, or any with 'secrets' in allowed_pod_fields; an admin may allow it in "
            "airflow.cfg [det] allowed_secrets, or for pool 'default_pool' in [det] pool_policies)",
        )
    ]


def test_an_admin_may_let_pod_specs_read_secrets_for_the_cluster_or_one_pool() -> None:
    spec: dict[str, Any] = {"spec": {}}
    for pod_spec, _, _ in SECRET_REFERENCES:  # all of them in one pod spec
        for key, items in pod_spec["spec"].items():
            spec["spec"].setdefault(key, []).extend(items)
    everywhere = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_pod_fields": "secrets"})
    assert fields(kubernetes(spec), everywhere) == []
    in_pool = settings.load(
        {
            "checkpoint_storage_path": "/x/ckpt",
            "pool_policies": '{"vault": {"allowed_pod_fields": ["secrets"]}}',
        }
    )
    assert fields({**kubernetes(spec), "resources": {"resource_pool": "vault"}}, in_pool) == []
    assert len(fields(kubernetes(spec), in_pool)) == len(SECRET_REFERENCES), "other pools: refused"


def test_harmless_pod_fields_pass() -> None:
    pod_spec = {
        "metadata": {"labels": {"team": "vision"}, "annotations": {"owner": "vision"}},
        "spec": {
            "nodeSelector": {"gpu": "a100"},
            "affinity": {"nodeAffinity": {}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
            "hostAliases": [{"ip": "10.0.0.5", "hostnames": ["data.internal"]}],
            "terminationGracePeriodSeconds": 60,
            "securityContext": {
                "runAsUser": 1000,
                "runAsNonRoot": True,
                "fsGroupChangePolicy": "OnRootMismatch",
                "seccompProfile": {"type": "RuntimeDefault"},
                "appArmorProfile": {"type": "RuntimeDefault"},
            },
            "volumes": [
                {"name": "scratch", "emptyDir": {"medium": "Memory"}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels"}]}},
                {"name": "p", "projected": {"sources": [{"downwardAPI": {}}, {"clusterTrustBundle": {}}]}},
            ],
            "containers": [
                {
                    "name": "c",
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
                    "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
        },
    }
    assert fields(kubernetes(pod_spec)) == []


# --- the pod spec is an allow-list: volume types, variable sources and security fields ---

# Volume types another team's data, the node's or the cloud's storage come through: each refused by
# default, naming its path. (pod_spec volume, the type)
VOLUME_TYPES: list[tuple[dict[str, Any], str]] = [
    ({"persistentVolumeClaim": {"claimName": "team-b-datasets"}}, "persistentVolumeClaim"),
    ({"nfs": {"server": "nfs.internal", "path": "/exports/team-b"}}, "nfs"),
    (
        {"csi": {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": "team-b-vault"}}},
        "csi",
    ),
    ({"azureFile": {"secretName": "team-b-storage", "shareName": "models"}}, "azureFile"),
    ({"gitRepo": {"repository": "https://git.internal/team-b/code.git"}}, "gitRepo"),
    ({"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.x", "lun": 0}}, "iscsi"),
    ({"hostPath": {"path": "/var/run/docker.sock"}}, "hostPath"),
    ({"cephfs": {"monitors": ["10.0.0.1"], "secretRef": {"name": "ceph"}}}, "cephfs"),
    ({"rbd": {"monitors": ["10.0.0.1"], "image": "disk"}}, "rbd"),
    ({"glusterfs": {"endpoints": "gluster", "path": "vol"}}, "glusterfs"),
    ({"ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}}, "ephemeral"),
    ({"image": {"reference": "registry.internal/team-b/weights:1"}}, "image"),
    ({"awsElasticBlockStore": {"volumeID": "vol-123"}}, "awsElasticBlockStore"),
    ({"fc": {"wwids": ["x"]}}, "fc"),
    ({"flexVolume": {"driver": "x/y"}}, "flexVolume"),
]


def volumes(*sources: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"volumes": [{"name": f"v{i}", **source} for i, source in enumerate(sources)]}}


@pytest.mark.parametrize(("source", "kind"), VOLUME_TYPES, ids=[kind for _, kind in VOLUME_TYPES])
def test_a_volume_type_the_policy_does_not_name_is_refused_by_its_path(
    source: dict[str, Any], kind: str
) -> None:
    normalized = config_to_dict(parse_config({**BASE, **kubernetes(volumes({"emptyDir": {}}, source))}))
    assert check(normalized, CLUSTER) == [
        (
            f"environment.pod_spec.spec.volumes[1].{kind}",
            f"volume type {kind} is not allowed by the cluster's runner policy (an admin may allow it in "
            "airflow.cfg [det] allowed_volume_types, or for pool 'default_pool' in [det] pool_policies)",
        )
    ]


def test_volume_types_the_admin_names_pass_for_the_cluster_or_one_pool() -> None:
    pod_spec = volumes(
        {"persistentVolumeClaim": {"claimName": "team-a-datasets"}}, {"nfs": {"server": "n", "path": "/x"}}
    )
    cluster = settings.load(
        {"checkpoint_storage_path": "/x/ckpt", "allowed_volume_types": "persistentVolumeClaim, nfs"}
    )
    assert fields(kubernetes(pod_spec), cluster) == []
    in_pool = settings.load(
        {
            "checkpoint_storage_path": "/x/ckpt",
            "pool_policies": '{"team-a": {"allowed_volume_types": ["persistentVolumeClaim", "nfs"]}}',
        }
    )
    assert fields({**kubernetes(pod_spec), "resources": {"resource_pool": "team-a"}}, in_pool) == []
    assert fields(kubernetes(pod_spec), in_pool) == [
        "environment.pod_spec.spec.volumes[0].persistentVolumeClaim",
        "environment.pod_spec.spec.volumes[1].nfs",
    ]
    # hostPath may still be allowed as the pod field it always was.
    host = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_pod_fields": "hostPath"})
    assert fields(kubernetes(volumes({"hostPath": {"path": "/data"}})), host) == []


def test_an_allowed_volume_type_still_names_only_allowed_secrets() -> None:
    cluster = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_volume_types": "csi,azureFile"})
    pod_spec = volumes(
        {"csi": {"driver": "d", "nodePublishSecretRef": {"name": "team-b-vault"}}},
        {"azureFile": {"secretName": "team-b-storage", "shareName": "s"}},
    )
    assert fields(kubernetes(pod_spec), cluster) == [
        "environment.pod_spec.spec.volumes[0].csi.nodePublishSecretRef",
        "environment.pod_spec.spec.volumes[1].azureFile.secretName",
    ]
    named = settings.load(
        {
            "checkpoint_storage_path": "/x/ckpt",
            "allowed_volume_types": "csi,azureFile",
            "allowed_secrets": "team-b-*",
        }
    )
    assert fields(kubernetes(pod_spec), named) == []


CONFIG_MAP_REFERENCES: list[tuple[dict[str, Any], str]] = [
    (volumes({"configMap": {"name": "team-b-settings"}}), "spec.volumes[0].configMap"),
    (
        volumes({"projected": {"sources": [{"configMap": {"name": "team-b-settings"}}]}}),
        "spec.volumes[0].projected.sources[0].configMap",
    ),
    (
        {"spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "team-b-settings"}}]}]}},
        "spec.containers[0].envFrom[0].configMapRef",
    ),
    (
        {
            "spec": {
                "initContainers": [
                    {
                        "name": "c",
                        "env": [
                            {
                                "name": "DB",
                                "valueFrom": {"configMapKeyRef": {"name": "team-b-settings", "key": "db"}},
                            }
                        ],
                    }
                ]
            }
        },
        "spec.initContainers[0].env[0].valueFrom.configMapKeyRef",
    ),
]


@pytest.mark.parametrize(
    ("pod_spec", "path"), CONFIG_MAP_REFERENCES, ids=[p for _, p in CONFIG_MAP_REFERENCES]
)
def test_a_config_map_the_admin_does_not_name_is_refused(pod_spec: dict[str, Any], path: str) -> None:
    normalized = config_to_dict(parse_config({**BASE, **kubernetes(pod_spec)}))
    assert check(normalized, CLUSTER) == [
        (
            f"environment.pod_spec.{path}",
            "ConfigMap 'team-b-settings' is not allowed by the cluster's runner policy (an admin may allow "
            "it in airflow.cfg [det] allowed_config_maps, or for pool 'default_pool' in [det] pool_policies)",
        )
    ]
    named = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_config_maps": "team-b-*"})
    assert fields(kubernetes(pod_spec), named) == []


def test_secrets_the_admin_names_pass_and_others_do_not() -> None:
    pod_spec = {
        "spec": {
            "imagePullSecrets": [{"name": "team-a-registry"}, {"name": "team-b-registry"}],
            "volumes": [{"name": "s", "secret": {"secretName": "team-a-keys"}}],
            "containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "team-a-env"}}]}],
        }
    }
    cluster = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_secrets": "team-a-*"})
    assert fields(kubernetes(pod_spec), cluster) == ["environment.pod_spec.spec.imagePullSecrets[1]"]
    assert fields(kubernetes(pod_spec)) == [
        "environment.pod_spec.spec.imagePullSecrets[0]",
        "environment.pod_spec.spec.imagePullSecrets[1]",
        "environment.pod_spec.spec.volumes[0].secret",
        "environment.pod_spec.spec.containers[0].envFrom[0].secretRef",
    ]


SECURITY_FIELDS: list[tuple[dict[str, Any], str]] = [
    (
        {"spec": {"securityContext": {"supplementalGroups": [1000]}}},
        "spec.securityContext.supplementalGroups",
    ),
    (
        {"spec": {"securityContext": {"seLinuxOptions": {"level": "s0:c123,c456"}}}},
        "spec.securityContext.seLinuxOptions",
    ),
    (
        {"spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}},
        "spec.securityContext.appArmorProfile.type",
    ),
    (
        in_container({"appArmorProfile": {"type": "Localhost", "localhostProfile": "x"}}),
        "spec.containers[0].securityContext.appArmorProfile.type",
    ),
    (
        in_container({"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}}),
        "spec.containers[0].securityContext.seccompProfile.type",
    ),
    (
        {"spec": {"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]}}},
        "spec.securityContext.sysctls",
    ),
    (
        in_container({"seLinuxOptions": {"type": "spc_t"}}),
        "spec.containers[0].securityContext.seLinuxOptions",
    ),
    (
        in_container({"windowsOptions": {"hostProcess": True}}),
        "spec.containers[0].securityContext.windowsOptions",
    ),
    ({"spec": {"runtimeClassName": "unsandboxed"}}, "spec.runtimeClassName"),
    ({"spec": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane"}]}}, "spec.tolerations"),
    ({"spec": {"schedulerName": "no-quota-scheduler"}}, "spec.schedulerName"),
    (
        {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "team-b-gpu"}]}},
        "spec.resourceClaims",
    ),
    (
        {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}},
        "metadata.annotations['container.apparmor.security.beta.kubernetes.io/c']",
    ),
]


@pytest.mark.parametrize(("pod_spec", "path"), SECURITY_FIELDS, ids=[p for _, p in SECURITY_FIELDS])
def test_security_and_placement_fields_are_refused_unless_allowed(
    pod_spec: dict[str, Any], path: str
) -> None:
    assert fields(kubernetes(pod_spec)) == [f"environment.pod_spec.{path}"]
    problem = check(config_to_dict(parse_config({**BASE, **kubernetes(pod_spec)})), CLUSTER)[0][1]
    entry = re.search(r"its entry in allowed_pod_fields is '(\w+)'", problem)
    assert entry, problem
    allowing = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_pod_fields": entry.group(1)})
    assert fields(kubernetes(pod_spec), allowing) == []


def test_a_field_the_policy_does_not_know_is_refused() -> None:
    pod_spec = {
        "spec": {
            "futureHostAccess": True,
            "securityContext": {"hostNamespaces": True},
            "volumes": [{"name": "p", "projected": {"sources": [{"podCertificate": {"signerName": "x"}}]}}],
        }
    }
    assert fields(kubernetes(pod_spec)) == [
        "environment.pod_spec.spec.futureHostAccess",
        "environment.pod_spec.spec.securityContext.hostNamespaces",
        "environment.pod_spec.spec.volumes[0].projected.sources[0].podCertificate",
    ]


def test_a_sidecars_image_is_judged_as_the_trials_is() -> None:
    strict = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_images": "registry.example/*"})
    pod_spec = {
        "spec": {
            "containers": [
                {"name": "determined-container", "image": "ignored/by-ours"},
                {"name": "forwarder", "image": "registry.example/fluent-bit:3"},
                {"name": "miner", "image": "evil/miner:1"},
            ]
        }
    }
    config = {
        **kubernetes(pod_spec),
        "environment": {**kubernetes(pod_spec)["environment"], "image": "registry.example/t:1"},
    }
    assert fields(config, strict) == ["environment.pod_spec.spec.containers[2].image"]


@pytest.mark.parametrize(
    ("storage", "field", "default"),
    [
        ({"type": "gcs", "bucket": "ckpt"}, "gcp_conn_id", "google_cloud_default"),
        ({"type": "azure", "container": "ckpt"}, "wasb_conn_id", "wasb_default"),
    ],
)
def test_gcs_and_azure_storage_name_only_a_connection_the_platform_gives_out(
    storage: dict[str, Any], field: str, default: str
) -> None:
    cluster = settings.load({"checkpoint_storage_path": "/x/ckpt", "allowed_conn_ids": "team_a"})
    assert fields({"checkpoint_storage": storage}, cluster) == []
    assert fields({"checkpoint_storage": {**storage, field: default}}, cluster) == []
    assert fields({"checkpoint_storage": {**storage, field: "team_a"}}, cluster) == []
    assert fields({"checkpoint_storage": {**storage, field: "admin"}}, cluster) == [
        f"checkpoint_storage.{field}"
    ]


def test_an_azure_account_outside_azure_must_be_one_the_admin_lists() -> None:
    """An account of Azure's own is Azure's public store; any other address the master would request
    (an account_url, a connection string's BlobEndpoint) must be listed."""
    cluster = settings.load(
        {"checkpoint_storage_path": "/x/ckpt", "allowed_storage_endpoints": "http://azurite.internal:10000"}
    )
    azure = {"type": "azure", "container": "ckpt"}
    assert (
        fields({"checkpoint_storage": {**azure, "account_url": "https://acct.blob.core.windows.net"}}) == []
    )
    listed = "http://azurite.internal:10000"
    assert fields({"checkpoint_storage": {**azure, "account_url": listed}}, cluster) == []
    assert fields({"checkpoint_storage": {**azure, "account_url": "http://169.254.169.254"}}, cluster) == [
        "checkpoint_storage.account_url"
    ]
    hidden = "AccountName=a;AccountKey=k;BlobEndpoint=http://10.0.0.1:10000/a"
    assert fields({"checkpoint_storage": {**azure, "connection_string": hidden}}, cluster) == [
        "checkpoint_storage.connection_string"
    ]
    public = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k;EndpointSuffix=core.windows.net"
    assert fields({"checkpoint_storage": {**azure, "connection_string": public}}) == []


def test_a_gcs_endpoint_must_be_one_the_admin_lists() -> None:
    gcs = {"type": "gcs", "bucket": "ckpt", "endpoint_url": "http://169.254.169.254"}
    assert fields({"checkpoint_storage": gcs}) == ["checkpoint_storage.endpoint_url"]
