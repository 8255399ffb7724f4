"""Registered through the `airflow.plugins` entry point (see pyproject.toml)."""

from __future__ import annotations

import functools
from typing import Any

from airflow.plugins_manager import AirflowPlugin

# What a det task's parse of dags/det_experiments.py imports (the DAG factory, the operators and the
# master's wire models). Airflow's workers fork each task from a process that has loaded the
# plugins, so the task finds these imported instead of importing them at every start (0.13 s of
# each trial slot's start on a 2-core machine; benchmarks/lifecycle_latency.py). The DAG processor's
# parses gain the same. None of them imports the master.
import det_airflow.dagfactory  # noqa: F401, E402
import det_airflow.operators  # noqa: F401, E402


def _load_asset_uri_handlers() -> None:
    """Every experiment DAG's finalize task updates a ``det://`` Asset. Airflow normalizes an Asset's
    URI by its scheme's handler, and at the first one it looks the handlers up in every installed
    provider, importing their modules (the amazon provider's S3 hook and boto3: 0.15-0.18 s of a
    task's parse of its DAG). Done once here, the tasks forked from this process find them loaded.
    A failure here is left for the parse, which raises it where Airflow reports DAG errors."""
    from airflow.sdk import Asset

    from det_airflow.lineage import experiment_asset_uri

    try:
        Asset(experiment_asset_uri("det_plugin_load"), group="det")
    except Exception:  # noqa: BLE001 - only a head start; the parse builds the real Assets
        pass


_load_asset_uri_handlers()


@functools.cache
def _master_apps() -> list[dict[str, Any]]:
    from det_airflow.master.app import create_app
    from det_airflow.webui import pages

    app = create_app()
    app.include_router(pages.router())
    return [{"app": app, "url_prefix": "/det", "name": "det-airflow master"}]


class _BuiltOnFirstRead:
    """``fastapi_apps``, built the first time Airflow reads it. Every Airflow process loads every
    plugin (scheduler, triggerer, workers, DAG processor), but only the API server reads
    ``fastapi_apps``, to mount them (and ``airflow plugins`` to list them), so only those build the
    master and import its routes."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        return _master_apps()


# The pages are a single-page app of their own (its own React, uPlot and CSS) in a same-origin
# iframe: Airflow does not lend its React to plugin bundles, and the iframe carries the login cookie.
# hrefs are relative so that they follow Airflow's base URL. In a DAG's or a task's tab (`?in=tab`)
# the pages leave out their own top bar: Airflow's navigation is around them there.
_UI = "det/ui/#"
_TAB = "det/ui/?in=tab#"


class _RootMiddlewaresOnFirstRead:
    """``fastapi_root_middlewares``, imported the first time Airflow reads it (the API server)."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        from det_airflow.webui.task_hosts import OnlyTheTaskOnItsHost

        return [{"middleware": OnlyTheTaskOnItsHost, "args": [], "kwargs": {}, "name": "det task hosts"}]


class DetPlugin(AirflowPlugin):
    name = "det"
    fastapi_apps = _BuiltOnFirstRead()
    fastapi_root_middlewares = _RootMiddlewaresOnFirstRead()
    external_views = [
        {
            "name": "Experiments",
            "href": f"{_UI}/experiments",
            "destination": "nav",
            "url_route": "det-experiments",
        },
        {"name": "Job queue", "href": f"{_UI}/queue", "destination": "nav", "url_route": "det-queue"},
        {"name": "Tasks", "href": f"{_UI}/tasks", "destination": "nav", "url_route": "det-tasks"},
        {"name": "Models", "href": f"{_UI}/models", "destination": "nav", "url_route": "det-models"},
        {
            "name": "Workspaces",
            "href": f"{_UI}/workspaces",
            "destination": "nav",
            "url_route": "det-workspaces",
        },
        {"name": "Webhooks", "href": f"{_UI}/webhooks", "destination": "nav", "url_route": "det-webhooks"},
        {
            "name": "Experiment",
            "href": f"{_TAB}/dag/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "det-experiment",
        },
        {
            "name": "Trial",
            "href": f"{_TAB}/dag/{{DAG_ID}}/run/{{RUN_ID}}/map/{{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "det-trial",
        },
    ]
