"""Valid Determined fields that det-airflow accepts but does not act on: users are told, in one line.

Remove a field from here in the change that starts acting on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import join

# Fields with no place in ExperimentConfig (kept only in its `raw` mapping), by the section that
# holds them: Determined's HPC launchers, Kerberos, TensorBoard service, Pachyderm, data layer,
# its internal settings, port proxy, and resources of other kinds of tasks (`slots`, before 0.27)
# or of its own agents.
UNTYPED: dict[str, tuple[str, ...]] = {
    "": ("slurm", "pbs", "security", "tensorboard_storage", "data_layer", "internal"),
    "integrations": ("pachyderm",),
    "resources": ("slots", "agent_label", "native_parallel"),
    "environment": ("proxy_ports", "ports"),
}
# Fields ExperimentConfig holds (training code can read them from its config) that nothing in
# det-airflow acts on yet.
TYPED = (
    "resources.weight",
    "resources.is_single_node",
    "environment.pod_spec",
    "log_policies",
    "profiling",
    "debug",
)
# `optimizations`: det.pytorch acts on aggregation_frequency and average_aggregated_gradients, and
# averages training metrics across workers; any other field is inactive unless it keeps
# Determined's default.
OPTIMIZATION_DEFAULTS: dict[str, Any] = {
    "average_training_metrics": True,
    "gradient_compression": False,
    "mixed_precision": "O0",
    "tensor_fusion_threshold": 64,
    "tensor_fusion_cycle_time": 5,
    "auto_tune_tensor_fusion": False,
    "grad_updates_size_file": None,
}
WARNING = "accepted but not acted on by det-airflow: "


def inactive_fields(data: Mapping[str, Any]) -> list[str]:
    """The inactive fields ``data`` sets, in the order written; null, false and empty set nothing,
    nor does a mapping of only those."""
    found = []
    for key, value in data.items():
        if key == "optimizations" and isinstance(value, Mapping):
            found += [
                join(key, inner)
                for inner, setting in value.items()
                if inner in OPTIMIZATION_DEFAULTS and setting != OPTIMIZATION_DEFAULTS[inner]
            ]
        elif _sets(value) and (key in UNTYPED[""] or key in TYPED):
            found.append(key)
        elif key in UNTYPED and isinstance(value, Mapping):
            found += [
                join(key, inner)
                for inner, setting in value.items()
                if _sets(setting) and (inner in UNTYPED[key] or join(key, inner) in TYPED)
            ]
    return found


def _sets(value: Any) -> bool:
    if isinstance(value, Mapping):  # `internal: {native: null}` sets nothing either
        return any(_sets(inner) for inner in value.values())
    return value is not None and value is not False and value != [] and value != ""
