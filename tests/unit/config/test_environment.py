"""The environment and bind_mounts sections: images, variables, capabilities, mounts."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import BindMount, EnvironmentConfig, parse_config

from ._configs import assert_problem, minimal, problems_of


def test_defaults() -> None:
    cfg = parse_config(minimal())
    assert cfg.environment == EnvironmentConfig()
    assert cfg.bind_mounts == ()


def test_one_image_and_one_variable_list_serve_every_device_type() -> None:
    env = parse_config(
        minimal(environment={"image": "pytorch:2.13", "environment_variables": ["A=1", "B=x=y"]})
    ).environment
    assert (env.image_cpu, env.image_cuda, env.image_rocm) == ("pytorch:2.13",) * 3
    assert env.environment_variables_cpu == env.environment_variables_cuda == ("A=1", "B=x=y")


def test_images_and_variables_per_device_type() -> None:
    env = parse_config(
        minimal(
            environment={
                "image": {"cpu": "torch:cpu", "cuda": "torch:cuda"},
                "environment_variables": {"cpu": ["OMP_NUM_THREADS=4"], "cuda": ["NCCL_DEBUG=INFO"]},
            }
        )
    ).environment
    assert (env.image_cpu, env.image_cuda, env.image_rocm) == ("torch:cpu", "torch:cuda", None)
    assert env.environment_variables_cpu == ("OMP_NUM_THREADS=4",)
    assert env.environment_variables_cuda == ("NCCL_DEBUG=INFO",)


def test_kubernetes_and_docker_settings() -> None:
    pod_spec = {"spec": {"nodeSelector": {"gpu": "a100"}}}
    env = parse_config(
        minimal(
            environment={
                "pod_spec": pod_spec,
                "add_capabilities": ["SYS_ADMIN"],
                "drop_capabilities": ["NET_RAW"],
                "force_pull_image": True,
                "registry_auth": {"username": "me", "password": "secret"},
            }
        )
    ).environment
    assert env.pod_spec == pod_spec
    assert (env.add_capabilities, env.drop_capabilities, env.force_pull_image) == (
        ("SYS_ADMIN",),
        ("NET_RAW",),
        True,
    )
    assert env.registry_auth == {"username": "me", "password": "secret"}


def test_bind_mounts() -> None:
    cfg = parse_config(
        minimal(
            bind_mounts=[
                {"host_path": "/data", "container_path": "/data", "read_only": True},
                {"host_path": "/scratch", "container_path": "scratch", "propagation": "rshared"},
            ]
        )
    )
    assert cfg.bind_mounts == (
        BindMount("/data", "/data", read_only=True),
        BindMount("/scratch", "scratch", propagation="rshared"),
    )


BAD_ENVIRONMENTS = [
    pytest.param({"environment_variables": ["FOO"]}, "environment.environment_variables[0]",
                 "expected NAME=VALUE, got 'FOO'", id="variable-without-equals"),
    pytest.param({"environment_variables": ["=1"]}, "environment.environment_variables[0]",
                 "expected NAME=VALUE, got '=1'", id="variable-without-name"),
    pytest.param({"environment_variables": {"cpu": ["A=1", 5]}}, "environment.environment_variables.cpu[1]",
                 "expected NAME=VALUE, got 5", id="variable-per-device"),
    pytest.param({"environment_variables": "A=1"}, "environment.environment_variables",
                 "expected a list of NAME=VALUE strings, got 'A=1'", id="variables-string"),
    pytest.param({"image": {"cuda": "a", "gpu": "b"}}, "environment.image.gpu",
                 "give 'cuda' or its older name 'gpu', not both", id="image-gpu-and-cuda"),
    pytest.param({"image": {"gpu": 5}}, "environment.image.gpu", "expected an image name", id="image-gpu-number"),
    pytest.param({"image": {"cpu": "a", "cdua": "b"}}, "environment.image.cdua", "did you mean 'cuda'?",
                 id="image-key-typo"),
    pytest.param({"image": 5}, "environment.image", "expected an image name", id="image-number"),
    pytest.param({"force_pull_image": "yes"}, "environment.force_pull_image", "expected true or false, got 'yes'",
                 id="force-pull-text"),
    pytest.param({"pod_spec": []}, "environment.pod_spec", "expected a mapping, got []", id="pod-spec-list"),
    pytest.param({"add_capabilities": "SYS_ADMIN"}, "environment.add_capabilities",
                 "expected a list of strings, got 'SYS_ADMIN'", id="capabilities-string"),
    pytest.param({"drop_capabilities": [1]}, "environment.drop_capabilities[0]",
                 "expected a non-empty string, got 1", id="capability-number"),
    pytest.param({"environment_variable": []}, "environment.environment_variable",
                 "unknown field; did you mean 'environment_variables'?", id="field-typo"),
]  # fmt: skip


@pytest.mark.parametrize(("environment", "path", "message"), BAD_ENVIRONMENTS)
def test_bad_environment_is_reported_at_its_field(
    environment: dict[str, Any], path: str, message: str
) -> None:
    assert_problem(problems_of(minimal(environment=environment)), path, message)


MOUNT = {"host_path": "/data", "container_path": "/data"}

BAD_MOUNTS = [
    pytest.param([{**MOUNT, "host_path": "data"}], "bind_mounts[0].host_path",
                 "expected an absolute path, got 'data'", id="relative-host-path"),
    pytest.param([MOUNT, {**MOUNT, "container_path": "."}], "bind_mounts[1].container_path",
                 "expected a path other than '.'", id="container-path-dot"),
    pytest.param([{"host_path": "/data"}], "bind_mounts[0].container_path",
                 "missing required field; expected a non-empty string", id="no-container-path"),
    pytest.param([{**MOUNT, "read_only": "yes"}], "bind_mounts[0].read_only",
                 "expected true or false, got 'yes'", id="read-only-text"),
    pytest.param([{**MOUNT, "readonly": True}], "bind_mounts[0].readonly",
                 "unknown field; did you mean 'read_only'?", id="read-only-typo"),
    pytest.param(["/data:/data"], "bind_mounts[0]", "expected a mapping {host_path, container_path}",
                 id="docker-style-string"),
    pytest.param({"host_path": "/data"}, "bind_mounts", "expected a list of {host_path, container_path} mappings",
                 id="not-a-list"),
]  # fmt: skip


@pytest.mark.parametrize(("mounts", "path", "message"), BAD_MOUNTS)
def test_bad_bind_mount_is_reported_at_its_index(mounts: Any, path: str, message: str) -> None:
    assert_problem(problems_of(minimal(bind_mounts=mounts)), path, message)
