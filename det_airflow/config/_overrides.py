"""``--config key=value`` overrides, applied to the raw mapping before it is validated."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from det_airflow.config._fields import show
from det_airflow.config._yaml import read_yaml
from det_airflow.errors import ConfigError

_OPTION = "--config"


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> list[tuple[str, str]]:
    """Sets each dotted key in ``data`` (in place) to its value read as YAML; returns the problems.

    Example:
        >>> data = {"searcher": {"name": "random"}}
        >>> apply_overrides(data, ["searcher.max_trials=4"])
        []
        >>> data
        {'searcher': {'name': 'random', 'max_trials': 4}}
    """
    problems = []
    for override in overrides:
        key, sep, text = override.partition("=")
        parts = key.strip().split(".")
        if not sep or "" in parts:
            problems.append((_OPTION, f"expected key=value (e.g. searcher.max_trials=4), got {override!r}"))
            continue
        try:
            value = read_yaml(text)
        except ConfigError as exc:
            problems.append((_OPTION, f"cannot read the value of {override!r} as YAML: {_first_line(exc)}"))
            continue
        problem = _set(data, parts, value)
        if problem:
            problems.append((_OPTION, f"cannot apply {override!r}: {problem}"))
    return problems


def _set(data: dict[str, Any], parts: list[str], value: Any) -> str | None:
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not (part.isdigit() and int(part) < len(node)):
                return f"{'.'.join(parts[:depth])} has no item {part}"
            index: Any = int(part)
        elif isinstance(node, dict):
            index = part
            if not last and node.get(part) is None:
                node[part] = {}
        else:
            return f"{'.'.join(parts[:depth])} is {show(node)}, not a mapping"
        if last:
            node[index] = value
        else:
            node = node[index]
    return None


def _first_line(exc: ConfigError) -> str:
    return str(exc).strip().splitlines()[0]
