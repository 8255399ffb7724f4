"""``determined.experimental``: ``core_v2`` and ``client`` (``det_airflow.experimental``), and the
names Determined re-exports here from its client."""

from det_airflow.experimental import client as client
from det_airflow.experimental import core_v2 as core_v2
from det_airflow.experimental.client import (
    Checkpoint,
    Determined,
    Experiment,
    Model,
    ModelOrderBy,
    ModelSortBy,
    ModelVersion,
    OrderBy,
    Trial,
    TrialOrderBy,
    TrialSortBy,
)

__all__ = [
    "Checkpoint",
    "Determined",
    "Experiment",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "Trial",
    "TrialOrderBy",
    "TrialSortBy",
    "client",
    "core_v2",
]
