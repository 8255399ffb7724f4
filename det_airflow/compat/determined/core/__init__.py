"""``determined.core``: det-airflow's Core API (``det_airflow.core``)."""

from det_airflow.core import *  # noqa: F403
from det_airflow.core import __all__ as __all__
