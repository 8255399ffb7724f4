"""The one task of an invalid experiment YAML's DAG: it fails with the YAML's problems.

The DAG factory gives an experiment YAML it cannot build a DAG of its own (the YAML's DAG id, tagged
``invalid``) instead of failing the factory file: an import error of the file would mark every
experiment DAG it holds as failed to load, and the other experiments would stop starting. Whoever
triggers the invalid one reads why in its task's log.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException


class InvalidExperimentOperator(BaseOperator):
    """Fails at once, without retries, with ``message`` (the YAML's problems, each naming its field)."""

    ui_color = "#f8d7da"

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(retries=0, **kwargs)
        self.message = message

    def execute(self, context: Any) -> None:
        raise AirflowFailException(self.message)


class FinishedExperimentOperator(InvalidExperimentOperator):
    """The one task of a finished experiment's DAG: triggered, it fails at once saying the experiment
    has finished (its DAG stays listed in Airflow for its runs, not to be run again)."""

    ui_color = "#e2e3e5"
