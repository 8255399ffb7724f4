"""Keras on det-airflow (Determined's ``determined.keras``).

``DeterminedCallback`` connects a plain ``model.fit()`` to the Core API (metrics, checkpoints,
resuming, searcher length, preemption); ``TensorBoard`` writes Keras's TensorBoard files where the
trial's TensorBoard reads them; ``TFKerasTrial`` with ``TFKerasTrialContext`` runs a legacy
``entrypoint: model_def:MyTrial`` (``python3 -m det_airflow.keras.run_trial model_def:MyTrial``).

Needs TensorFlow (``pip install 'det-airflow[keras]'``), imported on first use of a name here, so
that ``det_airflow.keras.run_trial`` can report a missing TensorFlow as one line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from det_airflow.keras._callback import CHECKPOINT_WEIGHTS, DeterminedCallback, TensorBoard
    from det_airflow.keras._trial import InputData, TFKerasTrial, TFKerasTrialContext

INSTALL_HINT = "det_airflow.keras needs TensorFlow (Keras 3): pip install 'det-airflow[keras]'"

_WHERE = {
    "CHECKPOINT_WEIGHTS": "_callback",
    "DeterminedCallback": "_callback",
    "TensorBoard": "_callback",
    "InputData": "_trial",
    "TFKerasTrial": "_trial",
    "TFKerasTrialContext": "_trial",
}

__all__ = [
    "CHECKPOINT_WEIGHTS",
    "INSTALL_HINT",
    "DeterminedCallback",
    "InputData",
    "TFKerasTrial",
    "TFKerasTrialContext",
    "TensorBoard",
    "require_tensorflow",
]


def require_tensorflow() -> None:
    """Import TensorFlow, or raise ImportError naming the extra to install."""
    try:
        import tensorflow  # noqa: F401
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'det_airflow.keras' has no attribute {name!r}")
    require_tensorflow()
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
