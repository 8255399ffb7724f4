"""``determined.experimental.core_v2``: the very module ``det_airflow.experimental.core_v2``.

Aliased rather than re-exported: ``init()`` sets the module's ``train``, ``checkpoint``... and
training code reads them from this name.
"""

import sys

from det_airflow.experimental import core_v2

sys.modules[__name__] = core_v2
