"""The ``environment`` and ``bind_mounts`` sections: what the trial container looks like."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, item, report_unknown, show
from det_airflow.config._inactive import UNTYPED
from det_airflow.config._types import BindMount, EnvironmentConfig

_FIELDS = (
    "image",
    "environment_variables",
    "pod_spec",
    "add_capabilities",
    "drop_capabilities",
    "force_pull_image",
    "registry_auth",
)
_FLAVORS = ("cpu", "cuda", "rocm")  # one image / variable list per kind of trial device
_OLD_CUDA = "gpu"  # Determined's name for the CUDA flavor before ROCm images were told apart
_MOUNT_FIELDS = ("host_path", "container_path", "read_only", "propagation")
_DEFAULTS = EnvironmentConfig()


def read_environment(value: Any, problems: Problems) -> EnvironmentConfig:
    if value is None:
        return _DEFAULTS
    if not isinstance(value, Mapping):
        problems.add("environment", f"expected a mapping, got {show(value)}")
        return _DEFAULTS
    f = Fields(value, "environment", problems, known=_FIELDS + UNTYPED["environment"])
    images = _per_flavor(f, "image", _read_image)
    variables = _per_flavor(f, "environment_variables", _read_variables)
    return EnvironmentConfig(
        image_cpu=images["cpu"],
        image_cuda=images["cuda"],
        image_rocm=images["rocm"],
        environment_variables_cpu=variables["cpu"] or (),
        environment_variables_cuda=variables["cuda"] or (),
        environment_variables_rocm=variables["rocm"] or (),
        pod_spec=f.mapping("pod_spec"),
        add_capabilities=f.strings("add_capabilities", nonempty=True),
        drop_capabilities=f.strings("drop_capabilities", nonempty=True),
        force_pull_image=f.boolean("force_pull_image", _DEFAULTS.force_pull_image),
        registry_auth=f.mapping("registry_auth"),
    )


def _per_flavor(f: Fields, key: str, read: Callable[[Any, str, Problems], Any]) -> dict[str, Any]:
    """``key`` is one value for every flavor, or a ``{cpu, cuda, rocm}`` mapping of values."""
    value = f.data.get(key)
    if not isinstance(value, Mapping):
        one = read(value, f.at(key), f.problems)
        return dict.fromkeys(_FLAVORS, one)
    report_unknown(value, f.at(key), f.problems, (*_FLAVORS, _OLD_CUDA))
    written = {flavor: flavor for flavor in _FLAVORS}  # the key each flavor was read from
    if _OLD_CUDA in value:
        if value.get("cuda") is not None:
            f.problems.add(f.at(f"{key}.{_OLD_CUDA}"), "give 'cuda' or its older name 'gpu', not both")
        else:
            written["cuda"] = _OLD_CUDA
    return {
        flavor: read(value.get(name), f.at(f"{key}.{name}"), f.problems) for flavor, name in written.items()
    }


def _read_image(value: Any, path: str, problems: Problems) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    problems.add(
        path, f"expected an image name, or a mapping {{cpu, cuda}} of image names, got {show(value)}"
    )
    return None


def _read_variables(value: Any, path: str, problems: Problems) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(path, f"expected a list of NAME=VALUE strings, got {show(value)}")
        return ()
    for i, variable in enumerate(value):
        if not isinstance(variable, str) or variable.partition("=")[0] in ("", variable):
            problems.add(item(path, i), f"expected NAME=VALUE, got {show(variable)}")
    return tuple(value)


def read_bind_mounts(value: Any, problems: Problems) -> tuple[BindMount, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(
            "bind_mounts", f"expected a list of {{host_path, container_path}} mappings, got {show(value)}"
        )
        return ()
    mounts = []
    for i, mount in enumerate(value):
        path = item("bind_mounts", i)
        if not isinstance(mount, Mapping):
            problems.add(path, f"expected a mapping {{host_path, container_path}}, got {show(mount)}")
            continue
        f = Fields(mount, path, problems, known=_MOUNT_FIELDS)
        host_path = f.string("host_path", required=True)
        if isinstance(host_path, str) and not posixpath.isabs(host_path):
            f.bad("host_path", "an absolute path")
        container_path = f.string("container_path", required=True, nonempty=True)
        if container_path == ".":
            f.bad("container_path", "a path other than '.' (the working directory holds the context)")
        mounts.append(
            BindMount(
                host_path=host_path,
                container_path=container_path,
                read_only=f.boolean("read_only", BindMount.read_only),
                propagation=f.string("propagation", BindMount.propagation, nonempty=True),
            )
        )
    return tuple(mounts)


def environment_to_dict(env: EnvironmentConfig) -> dict[str, Any]:
    return {
        "image": {"cpu": env.image_cpu, "cuda": env.image_cuda, "rocm": env.image_rocm},
        "environment_variables": {
            "cpu": list(env.environment_variables_cpu),
            "cuda": list(env.environment_variables_cuda),
            "rocm": list(env.environment_variables_rocm),
        },
        "pod_spec": env.pod_spec,
        "add_capabilities": list(env.add_capabilities),
        "drop_capabilities": list(env.drop_capabilities),
        "force_pull_image": env.force_pull_image,
        "registry_auth": env.registry_auth,
    }


def bind_mounts_to_dict(mounts: tuple[BindMount, ...]) -> list[dict[str, Any]]:
    return [
        {
            "host_path": m.host_path,
            "container_path": m.container_path,
            "read_only": m.read_only,
            "propagation": m.propagation,
        }
        for m in mounts
    ]
