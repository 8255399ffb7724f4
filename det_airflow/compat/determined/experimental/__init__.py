"""``determined.experimental``: ``core_v2`` and ``client`` (``det_airflow.experimental``)."""

from det_airflow.experimental import client as client
from det_airflow.experimental import core_v2 as core_v2
from det_airflow.experimental.client import Checkpoint, Model, ModelOrderBy, ModelSortBy, ModelVersion

__all__ = ["Checkpoint", "Model", "ModelOrderBy", "ModelSortBy", "ModelVersion", "client", "core_v2"]
