"""Turn what training code reports (numpy and torch scalars included) into plain JSON values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from det_airflow.errors import DetError

# JSON has no NaN or infinities; Determined sends them as these strings, and so do we.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def jsonable(value: Any, *, where: str = "value") -> Any:
    """A JSON-able copy of ``value``: scalars with ``.item()`` or ``__float__`` become numbers."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, where=f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, where=f"{where}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)  # numpy scalars, 0-d arrays, one-element tensors
    if callable(item):
        try:
            scalar = item()
        except (ValueError, RuntimeError):
            scalar = None
        if isinstance(scalar, bool | int | float):
            return jsonable(scalar, where=where)
    tolist = getattr(value, "tolist", None)  # arrays and tensors of several elements
    if callable(tolist):
        return jsonable(tolist(), where=where)
    try:
        return _finite(float(value))
    except (TypeError, ValueError):
        raise DetError(
            f"{where}: a {type(value).__name__} cannot be reported; report numbers, strings or lists"
        ) from None


def jsonable_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Check a metrics mapping (names are strings) and convert its values."""
    if not isinstance(metrics, Mapping):
        raise DetError(f"metrics must be a dict of name -> value, got {type(metrics).__name__}")
    return {str(name): jsonable(v, where=f"metric {name!r}") for name, v in metrics.items()}


def as_float(value: Any) -> float | None:
    """A reported value as a float (the non-finite strings included); None when it is no number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in NON_FINITE.values():
        return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[value])
    return None


def _finite(number: float) -> float | str:
    if math.isfinite(number):
        return number
    return NON_FINITE[repr(number)]
