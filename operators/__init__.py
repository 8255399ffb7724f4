"""Airflow operators and triggers of experiment DAGs (imported as det_airflow.operators)."""

from det_airflow.operators.experiment import (
    FinalizeExperimentOperator,
    RegisterExperimentOperator,
    SearcherSensor,
)
from det_airflow.operators.trial import TrialNodeOperator, TrialOperator
from det_airflow.operators.triggers import ExperimentReadyTrigger, TrialNodeTrigger, TrialSlotTrigger

__all__ = [
    "ExperimentReadyTrigger",
    "FinalizeExperimentOperator",
    "RegisterExperimentOperator",
    "SearcherSensor",
    "TrialNodeOperator",
    "TrialNodeTrigger",
    "TrialOperator",
    "TrialSlotTrigger",
]
