"""det-airflow: Determined AI experiments on Apache Airflow.

Training code uses it as Determined's ``determined`` package::

    import det_airflow as det

    info = det.get_cluster_info()          # None off-cluster
    with det.core.init() as core_context:  # the Core API
        ...

Importing it stays light (no torch, Airflow or optuna); ``det.pytorch`` is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from det_airflow import core
from det_airflow.cluster_info import ClusterInfo, TrialInfo, get_cluster_info
from det_airflow.errors import InvalidHP

__all__ = [
    "LOG_FORMAT",
    "ClusterInfo",
    "InvalidHP",
    "TrialInfo",
    "core",
    "experimental",
    "get_cluster_info",
    "pytorch",
]

#: Determined's log format, for ``logging.basicConfig(format=det.LOG_FORMAT)``.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

# Submodules loaded on first attribute access (PEP 562): they import torch or httpx.
_LAZY_SUBMODULES = frozenset({"pytorch", "experimental"})


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        module = importlib.import_module(f"det_airflow.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'det_airflow' has no attribute {name!r}")
