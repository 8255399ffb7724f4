"""``determined.keras``: DeterminedCallback, TensorBoard and TFKerasTrial (``det_airflow.keras``)."""

from det_airflow.keras import (
    DeterminedCallback,
    InputData,
    TensorBoard,
    TFKerasTrial,
    TFKerasTrialContext,
)

__all__ = ["DeterminedCallback", "InputData", "TFKerasTrial", "TFKerasTrialContext", "TensorBoard"]
