"""``determined.util``: the helpers Determined training code imports (``from determined import util``)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from det_airflow.core._jsonable import jsonable

from .common.util import is_overridden as is_overridden


def merge_dicts(base: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``source``'s values over it; nested mappings merge key by key."""
    merged = copy.deepcopy(dict(base))
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_dicts(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def json_encode(obj: Any, indent: str | int | None = None, sort_keys: bool = False) -> str:
    """``obj`` as JSON, with NumPy and torch scalars, arrays and tensors turned into plain values."""
    return json.dumps(jsonable(obj, where="json_encode"), indent=indent, sort_keys=sort_keys)


def calculate_batch_sizes(
    hparams: Mapping[str, Any], slots_per_trial: int, trialname: str
) -> tuple[int, int]:
    """``(global, per-slot)`` batch size from ``hparams["global_batch_size"]``."""
    if "global_batch_size" not in hparams:
        raise ValueError(f"{trialname} needs the hyperparameter global_batch_size")
    global_batch_size = int(hparams["global_batch_size"])
    if global_batch_size < slots_per_trial:
        raise ValueError(
            f"global_batch_size ({global_batch_size}) must be at least slots_per_trial ({slots_per_trial})"
        )
    return global_batch_size, global_batch_size // max(slots_per_trial, 1)
