"""Airflow operators and triggers of experiment DAGs (imported as det_airflow.operators)."""

from det_airflow.operators.experiment import (
    FinalizeExperimentOperator,
    RegisterExperimentOperator,
    SearcherSensor,
)
from det_airflow.operators.trial import TrialOperator
from det_airflow.operators.triggers import ExperimentReadyTrigger, TrialSlotTrigger

__all__ = [
    "ExperimentReadyTrigger",
    "FinalizeExperimentOperator",
    "RegisterExperimentOperator",
    "SearcherSensor",
    "TrialOperator",
    "TrialSlotTrigger",
]
