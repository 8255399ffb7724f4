"""The ``hyperparameters`` section (docs/semantics.md §1.1): reading, flattening and writing back."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import (
    Fields,
    Problems,
    did_you_mean,
    int_kind,
    is_int,
    is_numeric,
    join,
    show,
)
from det_airflow.config._limits import INT32_MAX, INT64_MAX, INT64_MIN, MAX_GRID_POINTS
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
    count = fields.integer("count", low=1, cap=MAX_GRID_POINTS)
    # As in Determined, a range holds more than one value; one value is a const hyperparameter.
    if kind == "int":
        low, high = _int64(fields, "minval"), _int64(fields, "maxval")
        if is_int(low) and is_int(high) and high <= low:
            fields.bad("maxval", f"an integer > minval ({low}); for one value use {{type: const}}")
        return IntHP(low, high, count)
    low, high = fields.number("minval", required=True), fields.number("maxval", required=True)
    if isinstance(low, float) and isinstance(high, float) and high <= low:
        fields.bad("maxval", f"a number > minval ({low:g}); for one value use {{type: const}}")
    if kind == "double":
        return DoubleHP(low, high, count)
    base = fields.number("base", above=0, required="for a log hyperparameter (e.g. base: 10)")
    if isinstance(base, float) and isinstance(low, float) and isinstance(high, float):
        _check_log_range(fields, base, low, high)
    return LogHP(low, high, base if base is not None else LogHP.base, count)


def _int64(fields: Fields, key: str) -> Any:
    value = fields.integer(key, required=True)
    if is_int(value) and not INT64_MIN <= value <= INT64_MAX:
        fields.bad(key, int_kind(INT64_MIN, INT64_MAX))
        return None
    return value


def _check_log_range(fields: Fields, base: float, low: float, high: float) -> None:
    """Values are ``base ** u``; each end must be a finite, non-zero float."""
    for key, exponent in (("minval", low), ("maxval", high)):
        try:
            value = base**exponent
        except OverflowError:
            value = math.inf
        if not (math.isfinite(value) and value > 0):
            fields.bad(key, f"an exponent for which {base:g} ** {key} is a finite non-zero float")


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
    """Grid search enumerates every range, so each int/double/log needs a number of points, and the
    grid (every combination, one trial each) must stay within ``MAX_GRID_POINTS``."""
    size = 1
    for path, hp in hparam_leaves(group):
        if isinstance(hp, IntHP | DoubleHP | LogHP) and hp.count is None:
            problems.add(
                join(_PATH, ".".join(path)),
                f"grid search needs 'count' (the number of grid points) on every {_kind(hp)} hyperparameter",
            )
        size *= _grid_points(hp)
    if size > MAX_GRID_POINTS:
        problems.add(
            _PATH,
            f"the grid has {size:,} points (one trial each); at most {MAX_GRID_POINTS:,} are allowed: "
            "lower the counts or the number of categorical values",
        )


def _grid_points(hp: Hyperparameter) -> int:
    if isinstance(hp, CategoricalHP):
        return len(hp.vals)
    if isinstance(hp, IntHP) and is_int(hp.count) and is_int(hp.minval) and is_int(hp.maxval):
        return min(hp.count, max(hp.maxval - hp.minval + 1, 1))  # the grid clamps count to the range
    if isinstance(hp, IntHP | DoubleHP | LogHP) and is_int(hp.count):
        return hp.count
    return 1


def check_global_batch_size(group: HParamGroup, slots_per_trial: int, problems: Problems) -> None:
    """``global_batch_size`` is split across slots, so every value it can take must be >= the slots."""
    if "global_batch_size" not in group:
        return
    hp = group["global_batch_size"]
    path = join(_PATH, "global_batch_size")
    low = max(slots_per_trial, 1)

    def fits(value: Any) -> bool:
        return is_int(value) and low <= value <= INT32_MAX

    def expected(value: Any) -> str:
        over = is_numeric(value) and not value <= INT32_MAX
        return f"expected {int_kind(low, INT32_MAX if over else None)} (at least resources.slots_per_trial)"

    if isinstance(hp, ConstHP):
        if not fits(hp.val):
            problems.add(path, f"{expected(hp.val)}, got {show(hp.val)}")
    elif isinstance(hp, IntHP):
        for key in ("minval", "maxval"):
            value = getattr(hp, key)
            if is_int(value) and not fits(value):
                problems.add(join(path, key), f"{expected(value)}, got {value}")
    elif isinstance(hp, CategoricalHP):
        for i, val in enumerate(hp.vals):
            if not fits(val):
                problems.add(f"{path}.vals[{i}]", f"{expected(val)}, got {show(val)}")
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
