"""Valid Determined fields that det-airflow accepts but does not act on: users are told, in one line.

Remove a field from here in the change that starts acting on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import join

# Fields with no place in ExperimentConfig (kept only in its `raw` mapping), by the section that
# holds them: Determined's HPC launchers, Kerberos, TensorBoard service, Pachyderm, port proxy,
# and resources of other kinds of tasks (`slots`, before 0.27) or of its own agents.
UNTYPED: dict[str, tuple[str, ...]] = {
    "": ("slurm", "pbs", "security", "tensorboard_storage", "integrations"),
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
    "optimizations",
    "debug",
)
WARNING = "accepted but not acted on by det-airflow: "


def inactive_fields(data: Mapping[str, Any]) -> list[str]:
    """The inactive fields ``data`` sets, in the order written; null, false and empty set nothing."""
    found = []
    for key, value in data.items():
        if _sets(value) and (key in UNTYPED[""] or key in TYPED):
            found.append(key)
        elif key in UNTYPED and isinstance(value, Mapping):
            found += [
                join(key, inner)
                for inner, setting in value.items()
                if _sets(setting) and (inner in UNTYPED[key] or join(key, inner) in TYPED)
            ]
    return found


def _sets(value: Any) -> bool:
    return value is not None and value is not False and value != {} and value != [] and value != ""
