"""``determined.transformers``: the Hugging Face Trainer callback (``det_airflow.transformers``)."""

from det_airflow.transformers import DetCallback

__all__ = ["DetCallback"]
