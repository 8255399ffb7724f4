"""DetHook: det's tasks and triggers reach the master through one Airflow connection."""

from __future__ import annotations

from functools import cached_property

from airflow.sdk import BaseHook

from det_airflow.api.internal import AsyncInternalClient, InternalClient


class DetHook(BaseHook):
    """The master's address (host, port) and det's service token (password) from an Airflow
    connection; `det admin migrate` creates ``det_default``.

    Args:
        det_conn_id: the connection to read.
        credentials: (master URL, token) already read from that connection, so that a trigger,
            which carries them, never looks the connection up again in the triggerer.
    """

    conn_name_attr = "det_conn_id"
    default_conn_name = "det_default"
    conn_type = "det"
    hook_name = "Determined (det-airflow)"

    def __init__(
        self, det_conn_id: str = default_conn_name, *, credentials: tuple[str, str] | None = None
    ) -> None:
        super().__init__()
        self.det_conn_id = det_conn_id
        if credentials is not None:
            self.__dict__["credentials"] = credentials

    @cached_property
    def credentials(self) -> tuple[str, str]:
        """(master URL, service token), read once: each connection lookup is a round trip."""
        conn = self.get_connection(self.det_conn_id)
        if not conn.host or not conn.password:
            raise ValueError(
                f"Airflow connection '{self.det_conn_id}' has no master address or token: "
                "run `det admin migrate`"
            )
        host = conn.host if "://" in conn.host else f"http://{conn.host}"
        if conn.port and host.count(":") < 2:
            host = f"{host}:{conn.port}"
        return host, conn.password

    def get_conn(self) -> InternalClient:
        """A new client of the master's internal routes; the caller closes it."""
        return InternalClient(*self.credentials)

    def get_async_conn(self) -> AsyncInternalClient:
        """The triggers' client of the master (each call opens and closes its own session)."""
        return AsyncInternalClient(*self.credentials)
