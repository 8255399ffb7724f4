"""``determined.pytorch.deepspeed``: det-airflow's DeepSpeedTrial and Trainer (``det_airflow.pytorch.deepspeed``)."""

from det_airflow.pytorch.deepspeed import *  # noqa: F403
from det_airflow.pytorch.deepspeed import __all__ as __all__
