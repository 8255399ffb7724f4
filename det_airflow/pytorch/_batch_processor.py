"""Batch inference over a dataset (Determined's ``pytorch.experimental.torch_batch_process``).

Every worker takes every ``size``-th batch; progress is checkpointed every ``checkpoint_interval``
batches, so a paused or restarted trial carries on after the last checkpointed batch.

Output goes where Determined puts it: ``upload_path()`` on rank ``r`` adds files under
``<output uuid>/rank_<r>/`` of the checkpoint storage, beside the checkpoints, not as one. The
output uuid is the chief's, shared by every worker, and kept in the progress checkpoints' metadata
(``default_output_uuid``), so a restarted trial adds to the same folders.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import torch
from torch import nn

from det_airflow import core
from det_airflow.core import DistributedContext
from det_airflow.errors import DetError

logger = logging.getLogger("det_airflow.pytorch")

# The progress checkpoints' metadata key naming the output's folder (Determined's name).
OUTPUT_UUID_KEY = "default_output_uuid"


class TorchBatchProcessorContext:
    """What a :class:`TorchBatchProcessor` is given: the device, ranks, and a way to save results."""

    def __init__(
        self, core_context: core.Context, device: torch.device, output_uuid: str | None = None
    ) -> None:
        self._core = core_context
        self.distributed: DistributedContext = core_context.distributed
        self.device = device
        # Every worker must be given the same one (torch_batch_process does); a lone worker may
        # leave it to be made here.
        self.output_uuid = output_uuid or str(uuid.uuid4())
        self._used_upload_path = False

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

    def upload_path(self) -> contextlib.AbstractContextManager[Path]:
        """A folder whose files go to ``<output uuid>/rank_<rank>/`` of the checkpoint storage when
        the block ends; any worker may call it, any number of times (files add up, a file of the
        same name is replaced). In a folder storage it is that folder itself."""
        self._used_upload_path = True
        return self._core.checkpoint._store_files(self.output_uuid, f"rank_{self.distributed.rank}")

    def _output_location(self) -> str:
        """Where ``upload_path()``'s files go, every worker's folder under it."""
        return self._core.checkpoint._files_location(self.output_uuid)

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
        start, output_uuid = _resume_point(core_context, info.latest_checkpoint if info else None)
        context = TorchBatchProcessorContext(core_context, device, output_uuid)
        processor = batch_processor_cls(context)
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
                done = round_end
                _checkpoint(core_context, processor, done, output_uuid)
                core_context.train.report_progress(done / max(total, 1))
                if core_context.preempt.should_preempt():
                    return
        processor.on_finish()
        if total > done:
            _checkpoint(core_context, processor, total, output_uuid)
        if any(dist.allgather(context._used_upload_path)) and dist.is_chief:
            logger.info("Files stored with default paths are at: %s", context._output_location())
        core_context.train.report_progress(1.0)


def _checkpoint(
    core_context: core.Context, processor: TorchBatchProcessor, batches: int, output_uuid: str
) -> None:
    processor.on_checkpoint_start()
    dist = core_context.distributed
    dist.allgather(None)  # every worker has finished its share up to `batches`
    if dist.is_chief:
        metadata = {"steps_completed": batches, OUTPUT_UUID_KEY: output_uuid}
        with core_context.checkpoint.store_path(metadata) as (path, _):
            (path / "batches_processed").write_text(str(batches))


def _resume_point(core_context: core.Context, latest: str | None) -> tuple[int, str]:
    """``(batches done, output uuid)``: the latest checkpoint's, else ``(0, a new uuid)``, the
    chief's, on every worker."""
    dist = core_context.distributed
    answer: tuple[int, str] | str | None = None
    if dist.is_chief:
        try:
            answer = _read_resume_point(core_context, latest)
        except DetError as exc:
            answer = str(exc)  # told to every worker, so that none waits for the chief
    answer = dist.broadcast(answer)
    if isinstance(answer, str):
        raise DetError(answer)
    assert answer is not None
    return answer


def _read_resume_point(core_context: core.Context, latest: str | None) -> tuple[int, str]:
    if not latest:
        return 0, str(uuid.uuid4())
    metadata = core_context.checkpoint.get_metadata(latest)
    output_uuid = metadata.get(OUTPUT_UUID_KEY)
    if output_uuid is None:  # a checkpoint of a version that kept no output folder
        output_uuid = str(uuid.uuid4())
    elif not _is_uuid(output_uuid):
        raise DetError(
            f"checkpoint {latest}: metadata {OUTPUT_UUID_KEY} must be a uuid such as "
            f"{uuid.uuid4()}, got {output_uuid!r}"
        )
    return int(metadata.get("steps_completed") or 0), output_uuid


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False
