"""environment and bind_mounts edges: exact messages, ROCm variables, and every bad mount reported."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import BindMount, EnvironmentConfig, parse_config

from ._configs import minimal, problems_of

MOUNT_HINT = "expected a mapping {host_path, container_path}, got "


def test_an_environment_that_is_not_a_mapping_is_quoted_back() -> None:
    assert problems_of(minimal(environment="pytorch:2.13")) == [
        ("environment", "expected a mapping, got 'pytorch:2.13'")
    ]


def test_a_section_naming_only_images_keeps_every_other_default() -> None:
    env = parse_config(minimal(environment={"image": "torch"})).environment
    assert env == EnvironmentConfig(image_cpu="torch", image_cuda="torch", image_rocm="torch")
    assert env.force_pull_image is False


def test_rocm_variables_are_kept_apart_from_the_others() -> None:
    env = parse_config(
        minimal(environment={"environment_variables": {"rocm": ["HIP_VISIBLE_DEVICES=0"]}})
    ).environment
    assert (
        env.environment_variables_cpu,
        env.environment_variables_cuda,
        env.environment_variables_rocm,
    ) == (
        (),
        (),
        ("HIP_VISIBLE_DEVICES=0",),
    )


@pytest.mark.parametrize(
    ("environment", "path", "message"),
    [
        (
            {"image": {"cuda": "a", "gpu": "b"}},
            "environment.image.gpu",
            "give 'cuda' or its older name 'gpu', not both",
        ),
        (
            {"image": 5},
            "environment.image",
            "expected an image name, or a mapping {cpu, cuda} of image names, got 5",
        ),
        (
            {"add_capabilities": [""]},
            "environment.add_capabilities[0]",
            "expected a non-empty string, got ''",
        ),
        (
            {"environment_variables": ["=x=y"]},
            "environment.environment_variables[0]",
            "expected NAME=VALUE, got '=x=y'",
        ),
    ],
)
def test_a_bad_environment_field_gets_its_exact_message(
    environment: dict[str, Any], path: str, message: str
) -> None:
    assert problems_of(minimal(environment=environment)) == [(path, message)]


def test_bind_mounts_that_are_not_a_list_are_quoted_back() -> None:
    assert problems_of(minimal(bind_mounts="/data:/data")) == [
        ("bind_mounts", "expected a list of {host_path, container_path} mappings, got '/data:/data'")
    ]


def test_every_mount_that_is_not_a_mapping_is_reported_not_only_the_first() -> None:
    assert problems_of(minimal(bind_mounts=["/data:/data", 5])) == [
        ("bind_mounts[0]", MOUNT_HINT + "'/data:/data'"),
        ("bind_mounts[1]", MOUNT_HINT + "5"),
    ]


@pytest.mark.parametrize(
    ("mount", "field", "message"),
    [
        ({"container_path": "/data"}, "host_path", "missing required field; expected a string"),
        (
            {"host_path": "/data", "container_path": "/data", "propagation": ""},
            "propagation",
            "expected a non-empty string, got ''",
        ),
    ],
)
def test_a_bad_mount_field_is_named_with_its_index(mount: dict[str, Any], field: str, message: str) -> None:
    assert problems_of(minimal(bind_mounts=[mount])) == [(f"bind_mounts[0].{field}", message)]


def test_a_mount_keeps_its_propagation() -> None:
    mounts = parse_config(
        minimal(bind_mounts=[{"host_path": "/data", "container_path": "/data", "propagation": "rshared"}])
    ).bind_mounts
    assert mounts == (BindMount(host_path="/data", container_path="/data", propagation="rshared"),)
