"""The searcher's user-facing error."""

from __future__ import annotations

from det_airflow.errors import DetError


class SearcherError(DetError):
    """A search cannot go on: a missing validation metric, an unusable config or stored state."""
