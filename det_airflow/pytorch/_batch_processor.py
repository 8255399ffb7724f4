"""Batch inference over a dataset (Determined's ``pytorch.experimental.torch_batch_process``).

Every worker takes every ``size``-th batch; progress is checkpointed every ``checkpoint_interval``
batches, so a paused or restarted trial carries on after the last checkpointed batch.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from det_airflow import core
from det_airflow.core import DistributedContext
from det_airflow.errors import DetError


class TorchBatchProcessorContext:
    """What a :class:`TorchBatchProcessor` is given: the device, ranks, and a way to save results."""

    def __init__(self, core_context: core.Context, device: torch.device) -> None:
        self._core = core_context
        self.distributed: DistributedContext = core_context.distributed
        self.device = device
        self._batches_done = 0  # progress so far: what upload_path's checkpoints record

    def to_device(self, data: Any) -> Any:
        """``data`` (tensors, possibly nested in dicts, lists and tuples) moved to ``device``."""
        if isinstance(data, torch.Tensor):
            return data.to(self.device)
        if isinstance(data, dict):
            return {k: self.to_device(v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return type(data)(self.to_device(v) for v in data)
        return data

    def prepare_model_for_inference(self, model: nn.Module) -> nn.Module:
        """The model in eval mode on ``device``."""
        return model.eval().to(self.device)

    def get_distributed_rank(self) -> int:
        return self.distributed.rank

    def get_distributed_size(self) -> int:
        return self.distributed.size

    @contextlib.contextmanager
    def upload_path(self) -> Iterator[Path]:
        """A folder whose files are stored (as a checkpoint of this trial) when the block ends."""
        metadata = {"steps_completed": self._batches_done, "batch_processor_output": True}
        with self._core.checkpoint.store_path(metadata) as (path, _):
            yield path

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        self._core.train.report_metrics(group, steps_completed, metrics)

    def report_task_using_model_version(self, model_version: Any) -> None:
        """Accepted; det-airflow has no model registry to link the run to."""

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        """Accepted; det-airflow does not record which checkpoint a run reads."""


class TorchBatchProcessor(abc.ABC):
    """Subclass it: load the model in ``__init__``, handle one batch in :meth:`process_batch`."""

    @abc.abstractmethod
    def __init__(self, context: TorchBatchProcessorContext) -> None: ...

    @abc.abstractmethod
    def process_batch(self, batch: Any, batch_idx: int) -> None:
        """Run inference on one batch (``batch_idx`` counts batches of the whole dataset)."""

    def on_checkpoint_start(self) -> None:
        """Before progress is checkpointed: save what has not been saved yet."""
        return None

    def on_finish(self) -> None:
        """After this worker's last batch."""
        return None


def torch_batch_process(
    batch_processor_cls: type[TorchBatchProcessor],
    dataset: Any,
    batch_size: int | None = None,
    max_batches: int | None = None,
    checkpoint_interval: int = 5,
    dataloader_kwargs: dict[str, Any] | None = None,
    distributed_context: DistributedContext | None = None,
) -> None:
    """Run ``batch_processor_cls`` over ``dataset``, split across the trial's workers.

    Resumes after the last checkpointed batch; in test mode it processes one batch per worker.
    """
    if checkpoint_interval < 1:
        raise DetError(
            f"torch_batch_process(checkpoint_interval=...): expected >= 1, got {checkpoint_interval}"
        )
    kwargs = dict(dataloader_kwargs or {})
    if "shuffle" in kwargs or "sampler" in kwargs:
        raise DetError("torch_batch_process(dataloader_kwargs=...): 'shuffle' and 'sampler' are not allowed")
    kwargs["batch_size"] = batch_size if batch_size is not None else kwargs.get("batch_size", 1)
    dist = distributed_context
    if dist is None and os.environ.get("WORLD_SIZE") and "RANK" in os.environ:
        dist = DistributedContext.from_torch_distributed()
    with core.init(distributed=dist) as core_context:
        dist = core_context.distributed
        device = torch.device("cpu")
        info = core_context.info
        if torch.cuda.is_available() and info is not None and info.slot_ids:
            device = torch.device("cuda", dist.local_rank % torch.cuda.device_count())
        context = TorchBatchProcessorContext(core_context, device)
        processor = batch_processor_cls(context)
        start = _resume_point(core_context, info.latest_checkpoint if info else None)
        loader = torch.utils.data.DataLoader(dataset, **kwargs)
        total = len(loader)
        if max_batches is not None:
            total = min(total, max_batches)
        if core_context.test_mode:
            total = min(total, start + dist.size)
        done = start
        for batch_idx, batch in enumerate(loader):
            if batch_idx >= total:
                break
            if batch_idx < start or batch_idx % dist.size != dist.rank:
                continue
            processor.process_batch(context.to_device(batch), batch_idx)
            # Workers move in rounds of `size` batches; every `checkpoint_interval` rounds, progress is saved.
            round_end = batch_idx - dist.rank + dist.size
            if (batch_idx // dist.size + 1) % checkpoint_interval == 0 and round_end <= total:
                done = context._batches_done = round_end
                _checkpoint(core_context, processor, done)
                core_context.train.report_progress(done / max(total, 1))
                if core_context.preempt.should_preempt():
                    return
        context._batches_done = total
        processor.on_finish()
        if total > done:
            _checkpoint(core_context, processor, total)
        core_context.train.report_progress(1.0)


def _checkpoint(core_context: core.Context, processor: TorchBatchProcessor, batches: int) -> None:
    processor.on_checkpoint_start()
    dist = core_context.distributed
    dist.allgather(None)  # every worker has finished its share up to `batches`
    if dist.is_chief:
        with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, _):
            (path / "batches_processed").write_text(str(batches))


def _resume_point(core_context: core.Context, latest: str | None) -> int:
    if not latest:
        return 0
    return int(core_context.checkpoint.get_metadata(latest).get("steps_completed") or 0)
