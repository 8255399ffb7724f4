"""``determined`` as det-airflow provides it to Determined training code: re-exports ``det_airflow``."""

import importlib
from typing import Any

from det_airflow import LOG_FORMAT, ClusterInfo, InvalidHP, TrialInfo, core, get_cluster_info

__all__ = [
    "LOG_FORMAT",
    "ClusterInfo",
    "InvalidHP",
    "TrialInfo",
    "common",
    "core",
    "experimental",
    "get_cluster_info",
    "keras",
    "launch",
    "pytorch",
    "transformers",
    "util",
]

_LAZY_SUBMODULES = frozenset({"pytorch", "experimental", "common", "keras", "launch", "transformers", "util"})


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'determined' has no attribute {name!r}")
