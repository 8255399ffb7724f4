"""airflow.cfg [det] read once into typed settings: defaults, lists, pool additions, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_airflow import settings
from det_airflow.settings import RunnerPolicy, SettingsError


def test_defaults_deny_everything_but_images(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    s = settings.load({})
    assert s.checkpoint_root == tmp_path / "det-checkpoints"
    assert s.trial_work_dir == tmp_path / "det-trials"
    assert s.policy == RunnerPolicy()
    assert s.policy.allowed_capabilities == () and s.policy.allowed_pod_fields == ()
    assert s.policy.allowed_images == ("*",)
    assert not s.policy.allow_root and s.policy.read_only_root
    assert s.trial_uid_range == (61184, 65519)
    assert s.allowed_roots(s.policy) == (tmp_path / "det-checkpoints", tmp_path / "det-trials")
    assert s.allowed_namespaces(s.policy) == {"default"}
    assert s.storage_conn_id == "aws_default"
    assert (s.gcs_conn_id, s.azure_conn_id) == ("google_cloud_default", "wasb_default")
    assert s.allowed_conn_ids(s.policy) == {"aws_default", "google_cloud_default", "wasb_default"}


def test_lists_paths_and_flags_are_read() -> None:
    s = settings.load(
        {
            "checkpoint_storage_path": "/data/ckpt/",
            "allowed_host_paths": " /datasets , /scratch/../models",
            "allowed_capabilities": "cap_sys_ptrace, IPC_LOCK",
            "allowed_pod_fields": "hostIPC",
            "container_allow_root": "yes",
            "container_read_only_root": "false",
            "namespace": "ml",
            "kubernetes_conn_id": "k8s_ml",
            "trial_uid_range": "70000-70009",
            "max_long_polls_per_user": "3",
        }
    )
    assert s.checkpoint_root == Path("/data/ckpt")
    assert s.policy.allowed_host_paths == ("/datasets", "/models")
    assert s.policy.allowed_capabilities == ("SYS_PTRACE", "IPC_LOCK")
    assert s.policy.allowed_pod_fields == ("hostIPC",)
    assert s.policy.allow_root and not s.policy.read_only_root
    assert s.allowed_namespaces(s.policy) == {"ml"}
    assert s.allowed_conn_ids(s.policy) == {"k8s_ml", "aws_default", "google_cloud_default", "wasb_default"}
    assert s.trial_uid_range == (70000, 70009)
    assert s.max_long_polls_per_user == 3


def test_a_pool_adds_to_the_cluster_policy() -> None:
    s = settings.load(
        {
            "allowed_capabilities": "IPC_LOCK",
            "pool_policies": '{"gpu": {"allowed_capabilities": ["SYS_PTRACE"], "allow_root": true}}',
        }
    )
    assert s.policy_for("gpu").allowed_capabilities == ("IPC_LOCK", "SYS_PTRACE")
    assert s.policy_for("gpu").allow_root
    assert s.policy_for("cpu") is s.policy
    assert s.policy_for(None) is s.policy


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"allowed_host_paths": "data"}, "[det] allowed_host_paths: 'data' is not an absolute path"),
        (
            {"container_allow_root": "maybe"},
            "[det] container_allow_root: expected true or false, got 'maybe'",
        ),
        ({"allowed_pod_fields": "hostNetwork, nodeSelector"}, "'nodeSelector' is not one of privileged"),
        ({"pool_policies": "{gpu: 1}"}, "[det] pool_policies: not JSON"),
        ({"pool_policies": '{"gpu": 1}'}, '[det] pool_policies: expected {"POOL"'),
        (
            {"pool_policies": '{"gpu": {"allow_everything": true}}'},
            "unknown runner-policy setting 'allow_everything'",
        ),
        (
            {"pool_policies": '{"gpu": {"allowed_devices": "/dev/fuse"}}'},
            "allowed_devices: expected a list of strings",
        ),
        (
            {"pool_policies": '{"gpu": {"allowed_pod_fields": ["nodeSelector"]}}'},
            "'nodeSelector' is not one of",
        ),
        ({"trial_uid_range": "500-600"}, "must start at 1000 or above"),
        ({"trial_uid_range": "70000-60000"}, "not end before it starts"),
        ({"trial_uid_range": "70000"}, "expected FIRST-LAST"),
        ({"max_creates_per_user": "0"}, "[det] max_creates_per_user: expected an integer >= 1, got '0'"),
    ],
)
def test_bad_settings_are_named(values: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings.load(values)
    assert message in str(info.value)
    assert "airflow.cfg [det]" in str(info.value)


def test_the_airflow_configuration_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__ALLOWED_DEVICES", "/dev/fuse")
    assert settings.load().policy.allowed_devices == ("/dev/fuse",)


def test_a_host_address_is_the_machines_name_unless_set_and_a_bad_one_names_the_setting() -> None:
    import socket

    assert settings.load({}).host_address == socket.gethostname()
    assert settings.load({"host_address": " 10.0.0.7 "}).host_address == "10.0.0.7"
    with pytest.raises(SettingsError) as info:
        settings.load({"host_address": "gpu 7"}).host_address  # noqa: B018
    assert str(info.value).startswith("airflow.cfg [det] host_address: 'gpu 7' must be a host name")
