"""Determined's ``pytorch.experimental``: batch inference with ``torch_batch_process``."""

from det_airflow.pytorch._batch_processor import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    torch_batch_process,
)

__all__ = ["TorchBatchProcessor", "TorchBatchProcessorContext", "torch_batch_process"]
