"""Upper bounds on what a config may ask for.

Determined's schema gives most numbers only a lower bound; its master then stores them in 32- or
64-bit integers and refuses what does not fit. We say so up front, with the field path, so that a
number no scheduler could honour (``max_restarts: 100000000000000000000``) is a config error instead
of a crash in the DAG processor or the searcher.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1  # counts and ids Determined keeps as 32-bit integers
INT64_MAX = 2**63 - 1  # lengths and step counts, stored as BIGINT
INT64_MIN = -(2**63)

# Each trial is a mapped task instance and a row; Airflow's own [core] max_map_length is 1024.
MAX_TRIALS = 100_000
MAX_GRID_POINTS = MAX_TRIALS
# Rung lengths are length / divisor ** (rungs - 1): these keep that a finite float.
MAX_RUNGS = 100
MAX_DIVISOR = 1000

# YAML input: refused before any alias is expanded or any value is copied.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_YAML_ALIASES = 1_000
MAX_YAML_NODES = 100_000  # values after expanding aliases
MAX_YAML_DEPTH = 64
