"""The ``hyperparameters`` section (REFERENCE.md §1.1): reading, flattening and writing back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, did_you_mean, is_int, join, show
from det_airflow.config._types import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HParamGroup,
    Hyperparameter,
    IntHP,
    LogHP,
)

TYPES = ("const", "int", "double", "log", "categorical")
_FIELDS = {
    "const": ("type", "val"),
    "int": ("type", "minval", "maxval", "count"),
    "double": ("type", "minval", "maxval", "count"),
    "log": ("type", "minval", "maxval", "base", "count"),
    "categorical": ("type", "vals"),
}
_PATH = "hyperparameters"


def read_hyperparameters(value: Any, problems: Problems) -> HParamGroup:
    """Reads the section: scalars and lists are constants, maps with ``type`` are typed, others nest."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(_PATH, f"expected a mapping of hyperparameter names to values, got {show(value)}")
        return {}
    return _read_group(value, _PATH, problems)


def _read_group(mapping: Mapping[str, Any], path: str, problems: Problems) -> HParamGroup:
    group: HParamGroup = {}
    for name, spec in mapping.items():
        at = join(path, name)
        if isinstance(spec, Mapping) and "type" not in spec:
            group[name] = _read_group(spec, at, problems)
        elif isinstance(spec, Mapping):
            hp = _read_typed(spec, at, problems)
            if hp is not None:
                group[name] = hp
        else:
            group[name] = ConstHP(spec)
    return group


def _read_typed(spec: Mapping[str, Any], path: str, problems: Problems) -> Hyperparameter | None:
    kind = spec["type"]
    if kind not in TYPES:
        problems.add(
            join(path, "type"),
            f"unknown hyperparameter type {show(kind)}; expected one of {', '.join(TYPES)}"
            + did_you_mean(kind, TYPES),
        )
        return None
    fields = Fields(spec, path, problems, known=_FIELDS[kind])
    if kind == "const":
        if "val" not in spec:
            fields.missing("val", "the constant value")
            return None
        return ConstHP(spec["val"])
    if kind == "categorical":
        vals = spec.get("vals")
        if not isinstance(vals, list) or not vals:
            fields.check("vals", "a non-empty list", lambda v: False, None, True)
            return None
        return CategoricalHP(tuple(vals))
    count = fields.integer("count", low=1)
    if kind == "int":
        low, high = fields.integer("minval", required=True), fields.integer("maxval", required=True)
        if is_int(low) and is_int(high) and high < low:
            fields.bad("maxval", f"an integer >= minval ({low})")
        return IntHP(low, high, count)
    low, high = fields.number("minval", required=True), fields.number("maxval", required=True)
    if isinstance(low, float) and isinstance(high, float) and high < low:
        fields.bad("maxval", f"a number >= minval ({low:g})")
    if kind == "double":
        return DoubleHP(low, high, count)
    return LogHP(low, high, fields.number("base", LogHP.base, above=0), count)


def hparam_leaves(group: HParamGroup) -> list[tuple[tuple[str, ...], Hyperparameter]]:
    """Every hyperparameter with its key path, nested groups flattened, in the order written.

    Example:
        >>> hparam_leaves({"lr": ConstHP(0.1), "opt": {"beta": ConstHP(0.9)}})
        [(('lr',), ConstHP(val=0.1)), (('opt', 'beta'), ConstHP(val=0.9))]
    """
    leaves: list[tuple[tuple[str, ...], Hyperparameter]] = []
    for name, node in group.items():
        if isinstance(node, dict):
            leaves.extend(((name, *path), hp) for path, hp in hparam_leaves(node))
        else:
            leaves.append(((name,), node))
    return leaves


def check_grid_counts(group: HParamGroup, problems: Problems) -> None:
    """Grid search enumerates every range, so each int/double/log needs a number of points."""
    for path, hp in hparam_leaves(group):
        if isinstance(hp, IntHP | DoubleHP | LogHP) and hp.count is None:
            problems.add(
                join(_PATH, ".".join(path)),
                f"grid search needs 'count' (the number of grid points) on every {_kind(hp)} hyperparameter",
            )


def check_global_batch_size(group: HParamGroup, slots_per_trial: int, problems: Problems) -> None:
    """``global_batch_size`` is split across slots, so every value it can take must be >= the slots."""
    if "global_batch_size" not in group:
        return
    hp = group["global_batch_size"]
    path = join(_PATH, "global_batch_size")
    low = max(slots_per_trial, 1)
    expected = f"an integer >= {low} (at least resources.slots_per_trial)"
    if isinstance(hp, ConstHP):
        if not (is_int(hp.val) and hp.val >= low):
            problems.add(path, f"expected {expected}, got {show(hp.val)}")
    elif isinstance(hp, IntHP):
        if is_int(hp.minval) and hp.minval < low:
            problems.add(join(path, "minval"), f"expected {expected}, got {hp.minval}")
    elif isinstance(hp, CategoricalHP):
        for i, val in enumerate(hp.vals):
            if not (is_int(val) and val >= low):
                problems.add(f"{path}.vals[{i}]", f"expected {expected}, got {show(val)}")
    else:
        got = "a nested group" if isinstance(hp, dict) else f"a {_kind(hp)} hyperparameter"
        problems.add(path, f"expected an integer, or an int, categorical or const hyperparameter, got {got}")


def _kind(hp: Hyperparameter) -> str:
    return {ConstHP: "const", IntHP: "int", DoubleHP: "double", LogHP: "log", CategoricalHP: "categorical"}[
        type(hp)
    ]


def hparams_to_dict(group: HParamGroup) -> dict[str, Any]:
    """The section in Determined's normalized shape: ``{type: ..., ...}`` leaves, groups as plain maps."""
    out: dict[str, Any] = {}
    for name, node in group.items():
        out[name] = hparams_to_dict(node) if isinstance(node, dict) else _hp_to_dict(node)
    return out


def _hp_to_dict(hp: Hyperparameter) -> dict[str, Any]:
    if isinstance(hp, ConstHP):
        return {"type": "const", "val": hp.val}
    if isinstance(hp, CategoricalHP):
        return {"type": "categorical", "vals": list(hp.vals)}
    out: dict[str, Any] = {"type": _kind(hp), "minval": hp.minval, "maxval": hp.maxval}
    if isinstance(hp, LogHP):
        out["base"] = hp.base
    if hp.count is not None:
        out["count"] = hp.count
    return out
