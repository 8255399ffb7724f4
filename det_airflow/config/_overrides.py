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


# What a run's conf may change in a YAML dropped into dags/ (`airflow dags trigger det_x -c '{...}'`,
# or Airflow's Trigger form, which offers these as the DAG's params). None leaves a field as it is.
RUN_CONF_FIELDS: dict[str, tuple[str, ...] | None] = {
    "description": None,
    "hyperparameters": None,  # any hyperparameter the YAML already has
    "searcher": ("max_trials", "max_length"),
    "resources": ("resource_pool", "priority"),
}


def apply_run_conf(data: dict[str, Any], conf: Any) -> list[tuple[str, str]]:
    """Applies a DAG run's conf to the raw config ``data`` (in place); returns the problems, each
    with the field path, for keys the conf may not set and hyperparameters the YAML does not have.

    Example:
        >>> data = {"hyperparameters": {"lr": 0.1}, "searcher": {"name": "single"}}
        >>> apply_run_conf(data, {"hyperparameters": {"lr": 0.5}, "searcher": {"max_trials": None}})
        []
        >>> data["hyperparameters"]
        {'lr': 0.5}
        >>> apply_run_conf(data, {"hyperparameters": {"momentum": 0.9}, "seed": 1})
        [('hyperparameters.momentum', 'not a hyperparameter of this experiment (it has: lr)'), ('seed', 'cannot be set by a run; a run may set description, hyperparameters, searcher.max_trials, searcher.max_length, resources.resource_pool, resources.priority')]
    """
    if not isinstance(conf, dict):
        return [("", f"the run's conf must be a mapping, got {show(conf)}")]
    settable = ", ".join(
        f"{key}.{sub}" if sub else key for key, subs in RUN_CONF_FIELDS.items() for sub in subs or ("",)
    )
    problems: list[tuple[str, str]] = []
    for key, value in conf.items():
        if key not in RUN_CONF_FIELDS:
            problems.append((str(key), f"cannot be set by a run; a run may set {settable}"))
        elif value is None:
            continue
        elif key == "description":
            data["description"] = value
        elif not isinstance(value, dict):
            problems.append((key, f"expected a mapping, got {show(value)}"))
        elif key == "hyperparameters":
            problems += _set_hyperparameters(data, value)
        else:
            target = data.get(key)
            if not isinstance(target, dict):
                target = data[key] = {}
            for sub, sub_value in value.items():
                if sub not in (RUN_CONF_FIELDS[key] or ()):
                    problems.append((f"{key}.{sub}", f"cannot be set by a run; a run may set {settable}"))
                elif sub_value is not None:
                    target[sub] = sub_value
    return problems


def _set_hyperparameters(data: dict[str, Any], values: dict[str, Any]) -> list[tuple[str, str]]:
    known = data.get("hyperparameters")
    known = known if isinstance(known, dict) else {}
    problems = []
    for name, value in values.items():
        if name not in known:
            have = ", ".join(map(str, known)) or "none"
            problems.append(
                (f"hyperparameters.{name}", f"not a hyperparameter of this experiment (it has: {have})")
            )
        elif value is not None:
            known[name] = value
    return problems
