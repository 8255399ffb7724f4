"""The ``resources`` section: slots, queue priority and weight, shared memory, devices."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from det_airflow.config._fields import Fields, Problems, is_int, item, show
from det_airflow.config._inactive import UNTYPED
from det_airflow.config._limits import INT32_MAX, INT64_MAX
from det_airflow.config._types import ResourcesConfig

_FIELDS = tuple(f.name for f in dataclasses.fields(ResourcesConfig))
_DEVICE_FIELDS = ("host_path", "container_path", "mode")
_DEFAULTS = ResourcesConfig()
_PATH = "resources"
# Docker (and so Determined) reads "4G" and "4Gi" alike as binary units; we follow it.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def read_resources(value: Any, problems: Problems) -> ResourcesConfig:
    if value is None:
        return _DEFAULTS
    if not isinstance(value, Mapping):
        problems.add(_PATH, f"expected a mapping, got {show(value)}")
        return _DEFAULTS
    f = Fields(value, _PATH, problems, known=_FIELDS + UNTYPED[_PATH])
    d = _DEFAULTS
    return ResourcesConfig(
        slots_per_trial=f.integer("slots_per_trial", d.slots_per_trial, low=0, cap=INT32_MAX),
        priority=f.integer("priority", d.priority, low=1, high=99),
        weight=f.number("weight", d.weight, above=0),
        max_slots=f.integer("max_slots", d.max_slots, low=1, cap=INT32_MAX),
        resource_pool=f.string("resource_pool", d.resource_pool),
        shm_size=_read_shm_size(f),
        devices=_read_devices(f),
        is_single_node=f.boolean("is_single_node", d.is_single_node),
    )


def parse_size(value: Any) -> int | None:
    """Bytes from an integer or a string such as ``"1.5G"``, ``"512M"``, ``"4Gi"``; None if unreadable."""
    if is_int(value):
        return value if 0 <= value <= INT64_MAX else None
    if not isinstance(value, str):
        return None
    match = _SIZE.match(value)
    if match is None:
        return None
    # Decimal: a long digit string would overflow a float on its way to int.
    size = int(Decimal(match.group(1)) * _UNIT[match.group(2).lower()])
    return size if size <= INT64_MAX else None


def _read_shm_size(f: Fields) -> Any:
    if not f.given("shm_size"):
        return _DEFAULTS.shm_size
    size = parse_size(f.data["shm_size"])
    if size is None:
        limit = f" of at most {INT64_MAX}" if is_int(f.data["shm_size"]) and f.data["shm_size"] > 0 else ""
        f.bad("shm_size", f"a size in bytes{limit}, or a string such as '4G', '1.5G' or '512Mi'")
        return _DEFAULTS.shm_size
    return size


def _read_devices(f: Fields) -> tuple[dict[str, Any], ...]:
    """Devices as ``{host_path, container_path, mode}``; Docker's ``host:container[:mode]`` also works."""
    value = f.get("devices", [])
    if not isinstance(value, list):
        f.bad("devices", "a list of devices")
        return ()
    devices = []
    for i, device in enumerate(value):
        path = item(f.at("devices"), i)
        if isinstance(device, str) and 2 <= len(device.split(":")) <= 3:
            host, container, *mode = device.split(":")
            device = {"host_path": host, "container_path": container, "mode": mode[0] if mode else "mrw"}
        if not isinstance(device, Mapping):
            f.problems.add(
                path, f"expected {{host_path, container_path, mode}} or 'host:container', got {show(device)}"
            )
            continue
        d = Fields(device, path, f.problems, known=_DEVICE_FIELDS)
        devices.append(
            {
                "host_path": d.string("host_path", required=True, nonempty=True),
                "container_path": d.string("container_path", required=True, nonempty=True),
                "mode": d.string("mode", "mrw", nonempty=True),
            }
        )
    return tuple(devices)


def resources_to_dict(resources: ResourcesConfig) -> dict[str, Any]:
    out = dataclasses.asdict(resources)
    out["devices"] = [dict(device) for device in resources.devices]
    return out
