"""``determined.pytorch.experimental``: ``det_airflow.pytorch.experimental``."""

from det_airflow.pytorch.experimental import *  # noqa: F403
from det_airflow.pytorch.experimental import __all__ as __all__
