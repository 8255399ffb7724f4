"""The resources section: slots, priority (lower runs first), weight, shared memory, devices."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import ResourcesConfig, parse_config

from ._configs import assert_problem, minimal, problems_of


def test_defaults() -> None:
    assert parse_config(minimal()).resources == ResourcesConfig(
        slots_per_trial=1, priority=42, weight=1.0, max_slots=None, resource_pool="", shm_size=4 * 1024**3
    )


def test_every_field() -> None:
    resources = parse_config(
        minimal(
            resources={
                "slots_per_trial": 0,
                "priority": 1,
                "weight": 2,
                "max_slots": 8,
                "resource_pool": "gpu-a100",
                "shm_size": 1024,
                "devices": [
                    {"host_path": "/dev/fuse", "container_path": "/dev/fuse"},
                    "/dev/infiniband:/dev/infiniband:rw",
                ],
                "is_single_node": True,
            }
        )
    ).resources
    assert (resources.slots_per_trial, resources.priority, resources.weight) == (0, 1, 2.0)
    assert (resources.max_slots, resources.resource_pool, resources.shm_size) == (8, "gpu-a100", 1024)
    assert resources.devices == (
        {"host_path": "/dev/fuse", "container_path": "/dev/fuse", "mode": "mrw"},
        {"host_path": "/dev/infiniband", "container_path": "/dev/infiniband", "mode": "rw"},
    )
    assert resources.is_single_node is True


@pytest.mark.parametrize(
    ("written", "size"),
    [
        (4096, 4096),
        ("512M", 512 * 1024**2),
        ("1.5G", int(1.5 * 1024**3)),
        ("4Gi", 4 * 1024**3),
        ("2gb", 2 * 1024**3),
        ("64k", 64 * 1024),
        ("1000", 1000),
    ],
)
def test_shm_size_in_bytes_or_with_a_unit(written: Any, size: int) -> None:
    assert parse_config(minimal(resources={"shm_size": written})).resources.shm_size == size


BAD_RESOURCES = [
    pytest.param({"priority": 0}, "resources.priority", "expected an integer between 1 and 99, got 0", id="priority-0"),
    pytest.param({"priority": 100}, "resources.priority", "expected an integer between 1 and 99, got 100",
                 id="priority-100"),
    pytest.param({"slots_per_trial": -1}, "resources.slots_per_trial", "expected an integer >= 0, got -1",
                 id="slots-negative"),
    pytest.param({"slots_per_trial": 1.5}, "resources.slots_per_trial", "expected an integer >= 0, got 1.5",
                 id="slots-fraction"),
    pytest.param({"slots_per_trial": True}, "resources.slots_per_trial", "expected an integer >= 0, got true",
                 id="slots-bool"),
    pytest.param({"weight": 0}, "resources.weight", "expected a number > 0, got 0", id="weight-zero"),
    pytest.param({"max_slots": 0}, "resources.max_slots", "expected an integer >= 1, got 0", id="max_slots-zero"),
    pytest.param({"shm_size": "4 gigs"}, "resources.shm_size",
                 "expected a size in bytes, or a string such as '4G', '1.5G' or '512Mi', got '4 gigs'", id="shm-text"),
    pytest.param({"shm_size": -5}, "resources.shm_size", "expected a size in bytes", id="shm-negative"),
    pytest.param({"resource_pool": 5}, "resources.resource_pool", "expected a string, got 5", id="pool-number"),
    pytest.param({"is_single_node": "no"}, "resources.is_single_node", "expected true or false, got 'no'",
                 id="single-node-text"),
    pytest.param({"slot_per_trial": 2}, "resources.slot_per_trial", "unknown field; did you mean 'slots_per_trial'?",
                 id="slots-typo"),
    pytest.param({"devices": [5]}, "resources.devices[0]", "expected {host_path, container_path, mode}",
                 id="device-number"),
    pytest.param({"devices": [{"host_path": "/dev/fuse"}]}, "resources.devices[0].container_path",
                 "missing required field", id="device-half"),
]  # fmt: skip


@pytest.mark.parametrize(("resources", "path", "message"), BAD_RESOURCES)
def test_bad_resources_are_reported_at_their_field(
    resources: dict[str, Any], path: str, message: str
) -> None:
    assert_problem(problems_of(minimal(resources=resources)), path, message)


def test_the_section_must_be_a_mapping() -> None:
    assert_problem(problems_of(minimal(resources=4)), "resources", "expected a mapping, got 4")
