"""The few fields of the experiment config the Core API reads.

The config arrives as the normalized dict in the file that ``DET_EXPERIMENT_CONFIG_FILE`` names (read
by ``det_airflow.cluster_info``); these readers also accept the shapes a user writes
(``max_length: 100`` or ``{batches: 100}``), so off-cluster code may pass a YAML it loaded itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def searcher_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    searcher = config.get("searcher")
    return searcher if isinstance(searcher, Mapping) else {}


def searcher_length(config: Mapping[str, Any]) -> int | None:
    """The value of ``searcher.max_length`` (whatever its unit), else ``max_time``; None if neither."""
    searcher = searcher_section(config)
    length = searcher.get("max_length")
    if isinstance(length, Mapping):
        # {batches: N} / {records: N} / {epochs: N}; the normalized form may carry {unit, value}.
        if "value" in length:
            return int(length["value"])
        for unit in ("batches", "records", "epochs"):
            if unit in length:
                return int(length[unit])
        return None
    if isinstance(length, int | float) and not isinstance(length, bool):
        return int(length)
    max_time = searcher.get("max_time")
    return int(max_time) if isinstance(max_time, int | float) and not isinstance(max_time, bool) else None


def searcher_metric(config: Mapping[str, Any]) -> tuple[str | None, bool]:
    """``(searcher.metric, searcher.smaller_is_better)``; the metric is None when unknown."""
    searcher = searcher_section(config)
    metric = searcher.get("metric")
    return (str(metric) if metric else None), bool(searcher.get("smaller_is_better", True))


def checkpoint_storage(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    storage = config.get("checkpoint_storage")
    return storage if isinstance(storage, Mapping) else None
