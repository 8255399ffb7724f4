"""Ships a trial's output lines to the master with the service token (det_airflow.log_shipping)."""

from __future__ import annotations

from typing import Any

from det_airflow.api.internal import InternalClient
from det_airflow.log_shipping import LogShipper as _Shipper
from det_airflow.log_shipping import parse_line

__all__ = ["LogShipper", "parse_line"]


class LogShipper(_Shipper):
    """A trial's output lines, posted to the master's internal logs route."""

    def __init__(
        self, client: InternalClient, trial_id: int, *, interval: float = 1.0, log: Any = None
    ) -> None:
        super().__init__(
            lambda batch: client.ship_logs(trial_id, batch),
            name=f"det-logs-{trial_id}",
            interval=interval,
            warn=log.warning if log is not None else None,
        )
        self.client = client
        self.trial_id = trial_id
