"""resources edges: defaults inside a given section, the shm_size limits, and each device mistake word for word."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import ResourcesConfig, parse_config

from ._configs import minimal, problems_of

INT64_MAX = 2**63 - 1
SIZE_HINT = "a size in bytes{}, or a string such as '4G', '1.5G' or '512Mi'"


def resources_of(section: Any) -> ResourcesConfig:
    return parse_config(minimal(resources=section)).resources


def test_a_section_naming_one_field_keeps_every_other_default() -> None:
    assert resources_of({"slots_per_trial": 2}) == ResourcesConfig(
        slots_per_trial=2,
        priority=42,
        weight=1.0,
        max_slots=None,
        resource_pool="",
        shm_size=4 * 1024**3,
        devices=(),
        is_single_node=None,
    )


@pytest.mark.parametrize("written", [INT64_MAX, str(INT64_MAX)])
def test_shm_size_may_be_exactly_the_largest_64_bit_size(written: Any) -> None:
    assert resources_of({"shm_size": written}).shm_size == INT64_MAX


@pytest.mark.parametrize(
    ("written", "shown", "limit"),
    [
        (INT64_MAX + 1, str(INT64_MAX + 1), f" of at most {INT64_MAX}"),
        (str(INT64_MAX + 1), repr(str(INT64_MAX + 1)), ""),
        ("8388608T", "'8388608T'", ""),
        (-1, "-1", ""),
    ],
)
def test_shm_size_one_past_the_limit_is_refused(written: Any, shown: str, limit: str) -> None:
    assert problems_of(minimal(resources={"shm_size": written})) == [
        ("resources.shm_size", f"expected {SIZE_HINT.format(limit)}, got {shown}")
    ]


def test_devices_that_are_not_a_list_are_refused_by_name() -> None:
    assert problems_of(minimal(resources={"devices": "/dev/fuse"})) == [
        ("resources.devices", "expected a list of devices, got '/dev/fuse'")
    ]


@pytest.mark.parametrize(
    ("written", "device"),
    [
        ("/dev/fuse:/dev/fuse", {"host_path": "/dev/fuse", "container_path": "/dev/fuse", "mode": "mrw"}),
        ("/dev/sda:/dev/xvda:r", {"host_path": "/dev/sda", "container_path": "/dev/xvda", "mode": "r"}),
    ],
)
def test_docker_style_devices_default_to_mode_mrw(written: str, device: dict[str, str]) -> None:
    assert resources_of({"devices": [written]}).devices == (device,)


def test_every_bad_device_is_reported_not_only_the_first() -> None:
    assert problems_of(minimal(resources={"devices": [5, "a:b:c:d", "/dev/fuse"]})) == [
        ("resources.devices[0]", "expected {host_path, container_path, mode} or 'host:container', got 5"),
        (
            "resources.devices[1]",
            "expected {host_path, container_path, mode} or 'host:container', got 'a:b:c:d'",
        ),
        (
            "resources.devices[2]",
            "expected {host_path, container_path, mode} or 'host:container', got '/dev/fuse'",
        ),
    ]


@pytest.mark.parametrize(
    ("device", "path", "message"),
    [
        ({"container_path": "/dev/x"}, "host_path", "missing required field; expected a non-empty string"),
        ({"host_path": "/dev/x"}, "container_path", "missing required field; expected a non-empty string"),
        ({"host_path": "", "container_path": "/dev/x"}, "host_path", "expected a non-empty string, got ''"),
        (
            {"host_path": "/dev/x", "container_path": ""},
            "container_path",
            "expected a non-empty string, got ''",
        ),
        (":/dev/x", "host_path", "expected a non-empty string, got ''"),
        ("/dev/x:", "container_path", "expected a non-empty string, got ''"),
        ("/dev/x:/dev/x:", "mode", "expected a non-empty string, got ''"),
        (
            {"host_path": "/dev/x", "container_path": "/dev/x", "mode": ""},
            "mode",
            "expected a non-empty string, got ''",
        ),
        (
            {"host_path": "/dev/x", "container_path": "/dev/x", "mod": "r"},
            "mod",
            "unknown field; did you mean 'mode'?",
        ),
    ],
)
def test_a_bad_device_field_is_named_with_its_index(device: Any, path: str, message: str) -> None:
    assert problems_of(minimal(resources={"devices": [device]})) == [
        (f"resources.devices[0].{path}", message)
    ]
