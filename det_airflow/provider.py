"""det-airflow as an Airflow provider: what ``airflow providers get det-airflow`` shows, read through
the ``apache_airflow_provider`` entry point (pyproject.toml).

This module imports nothing of Airflow or of det-airflow: every Airflow process that loads its
providers reads it, and imports the classes it names only when it needs them. So the ``det``
connection's form is declared here, and DetHook reads it from here.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

PACKAGE = "det-airflow"
INTEGRATION = "Determined (det-airflow)"
CONN_TYPE = "det"
HOOK_NAME = INTEGRATION
# The det connection form's fields beyond host, port and password.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "owner": {
        "label": "Experiment owner",
        "description": "The user that experiments submitted through this connection belong to "
        "(a DetExperimentOperator's experiment_owner wins).",
        "schema": {"type": ["string", "null"]},
    },
}
# Which of Airflow's standard connection fields the form shows, and under which labels.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "login"],
    "relabeling": {"host": "Master URL", "password": "Service token"},
    "placeholders": {
        "host": "http://127.0.0.1:8080",
        "password": "det's service token (`det admin migrate` writes it)",
        "owner": "airflow",
    },
}


def _version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0.0.0"


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata, valid against Airflow's ``provider_info.schema.json``."""
    behaviour = UI_FIELD_BEHAVIOUR
    return {
        "package-name": PACKAGE,
        "name": "det-airflow",
        "description": "Determined AI experiments on Apache Airflow: experiment YAMLs become DAGs, "
        "hyperparameter searches, distributed trials, the `det` CLI, and operators that run an "
        "experiment as one task of any pipeline.",
        "versions": [_version()],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://docs.determined.ai/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["det_airflow.operators.pipeline", "det_airflow.operators.experiment"],
            }
        ],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["det_airflow.operators.pipeline"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["det_airflow.operators.hooks"]}],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["det_airflow.operators.triggers", "det_airflow.operators.pipeline"],
            }
        ],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "det_airflow.operators.hooks.DetHook",
                "hook-name": HOOK_NAME,
                "conn-fields": CONN_FIELDS,
                # The provider metadata spells these keys with dashes.
                "ui-field-behaviour": {
                    "hidden-fields": behaviour["hidden_fields"],
                    "relabeling": behaviour["relabeling"],
                    "placeholders": behaviour["placeholders"],
                },
            }
        ],
        "extra-links": ["det_airflow.operators.pipeline.DetExperimentLink"],
        "plugins": [{"name": "det", "plugin-class": "det_airflow.webui.plugin.DetPlugin"}],
    }
