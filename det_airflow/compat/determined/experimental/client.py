"""``determined.experimental.client``: the very module ``det_airflow.experimental.client``."""

import sys

from det_airflow.experimental import client

sys.modules[__name__] = client
