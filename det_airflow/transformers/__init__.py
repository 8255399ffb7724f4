"""Hugging Face ``transformers.Trainer`` on det-airflow: ``DetCallback`` reports its metrics,
checkpoints, searcher progress and preemption through the Core API (Determined's
``determined.transformers``). Needs the ``transformers`` extra: ``pip install 'det-airflow[transformers]'``."""

try:
    import transformers as _transformers  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "det_airflow.transformers needs the transformers package: pip install 'det-airflow[transformers]'"
    ) from exc

from det_airflow.transformers._callback import DetCallback

__all__ = ["DetCallback"]
