"""How det tasks find the master: the Airflow connection named by `airflow.master_conn_id`."""

from __future__ import annotations

from det_airflow.api.internal import InternalClient


def master_credentials(conn_id: str) -> tuple[str, str]:
    """(master URL, service token) from the connection `det admin migrate` created."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if not conn.host or not conn.password:
        raise ValueError(
            f"Airflow connection '{conn_id}' has no master address or token: run `det admin migrate`"
        )
    host = conn.host if "://" in conn.host else f"http://{conn.host}"
    if conn.port and host.count(":") < 2:
        host = f"{host}:{conn.port}"
    return host, conn.password


def internal_client(conn_id: str) -> InternalClient:
    return InternalClient(*master_credentials(conn_id))
