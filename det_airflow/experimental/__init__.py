"""Determined's ``det.experimental`` surface that training code uses: ``core_v2`` and ``client``."""

from det_airflow.experimental import client, core_v2

__all__ = ["client", "core_v2"]
