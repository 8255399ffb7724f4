"""``determined.pytorch``: det-airflow's PyTorchTrial and Trainer (``det_airflow.pytorch``)."""

from det_airflow.pytorch import *  # noqa: F403
from det_airflow.pytorch import __all__ as __all__
