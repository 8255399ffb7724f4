"""runner_policy.check: every field a config asks of its runner, judged against the admin's policy."""

from __future__ import annotations

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


def test_resolving_links_catches_a_link_out_of_an_allowed_folder(tmp_path: Path) -> None:
    (tmp_path / "escape").symlink_to("/etc")
    cluster = settings.load({"checkpoint_storage_path": str(tmp_path)})
    config = {"airflow": {"trial_runner": "docker"}}
    mount = [{"host_path": str(tmp_path / "escape"), "container_path": "/x"}]
    assert fields({**config, "bind_mounts": mount}, cluster) == []  # as the master sees the name
    assert fields({**config, "bind_mounts": mount}, cluster, resolve=True) == ["bind_mounts[0].host_path"]


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
                    {"name": "cm", "configMap": {"name": "settings"}},
                    {
                        "name": "p",
                        "projected": {
                            "sources": [
                                {"configMap": {"name": "settings"}},
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
            f"{subject} is not allowed by the cluster's runner policy (its entry in allowed_pod_fields is "
            "'secrets'; an admin may allow it in airflow.cfg [det] allowed_pod_fields, or for pool "
            "'default_pool' in [det] pool_policies)",
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
        "metadata": {"labels": {"team": "vision"}},
        "spec": {
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False}}],
        },
    }
    assert fields(kubernetes(pod_spec)) == []


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
