"""Registered through the `airflow.plugins` entry point (see pyproject.toml)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI

from det_airflow.master.app import create_app
from det_airflow.webui import pages


def _app() -> FastAPI:
    app = create_app()
    app.include_router(pages.router())
    return app


# The pages are a single-page app of their own (its own React, uPlot and CSS) in a same-origin
# iframe: Airflow does not lend its React to plugin bundles, and the iframe carries the login cookie.
# hrefs are relative so that they follow Airflow's base URL.
_UI = "det/ui/#"


class DetPlugin(AirflowPlugin):
    name = "det"
    fastapi_apps = [{"app": _app(), "url_prefix": "/det", "name": "det-airflow master"}]
    external_views = [
        {
            "name": "Experiments",
            "href": f"{_UI}/experiments",
            "destination": "nav",
            "url_route": "det-experiments",
        },
        {"name": "Job queue", "href": f"{_UI}/queue", "destination": "nav", "url_route": "det-queue"},
        {
            "name": "Experiment",
            "href": f"{_UI}/dag/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "det-experiment",
        },
        {
            "name": "Trial",
            "href": f"{_UI}/dag/{{DAG_ID}}/run/{{RUN_ID}}/map/{{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "det-trial",
        },
    ]
