"""DetHook: det's tasks and triggers reach the master through one Airflow connection."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from det_airflow.api.internal import AsyncInternalClient, InternalClient
from det_airflow.provider import CONN_FIELDS, CONN_TYPE, HOOK_NAME, UI_FIELD_BEHAVIOUR


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
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    # Declared in det_airflow/provider.py, which Airflow reads without importing this module.
    conn_fields: dict[str, dict[str, Any]] = CONN_FIELDS
    ui_field_behaviour: dict[str, Any] = UI_FIELD_BEHAVIOUR

    def __init__(
        self, det_conn_id: str = default_conn_name, *, credentials: tuple[str, str] | None = None
    ) -> None:
        super().__init__()
        self.det_conn_id = det_conn_id
        if credentials is not None:
            self.__dict__["credentials"] = credentials

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The form's extra fields, for Airflow versions that ask the hook (newer ones read
        ``conn-fields`` from the provider's metadata)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from wtforms import StringField

        return {
            name: StringField(field["label"], widget=BS3TextFieldWidget(), description=field["description"])
            for name, field in cls.conn_fields.items()
        }

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Which of Airflow's standard connection fields the form shows, and under which labels."""
        return {key: value.copy() for key, value in cls.ui_field_behaviour.items()}

    @cached_property
    def owner(self) -> str | None:
        """The ``owner`` extra of the connection: whom submitted experiments belong to."""
        extra = self.get_connection(self.det_conn_id).extra_dejson
        value = extra.get("owner") or extra.get(f"extra__{self.conn_type}__owner")
        return str(value) if value else None

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
