"""Registered through the `airflow.plugins` entry point (see pyproject.toml)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from det_airflow.master.app import create_app


class DetPlugin(AirflowPlugin):
    name = "det"
    fastapi_apps = [{"app": create_app(), "url_prefix": "/det", "name": "det-airflow master"}]
