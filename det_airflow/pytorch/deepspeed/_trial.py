"""``DeepSpeedTrial``: training code around DeepSpeed engines, as a class the DeepSpeed Trainer drives."""

from __future__ import annotations

import abc
import pathlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.pytorch._callback import PyTorchCallback
    from det_airflow.pytorch._data import DataLoader
    from det_airflow.pytorch.deepspeed._context import DeepSpeedTrialContext


class DeepSpeedTrial(abc.ABC):
    """Subclass it: build engines with ``deepspeed.initialize`` and register them with
    ``context.wrap_model_engine`` in ``__init__``; the Trainer runs the loop, metrics, validation,
    checkpoints (DeepSpeed's own, every worker writing its shard), preemption and resume.

    ``train_batch`` and ``evaluate_batch`` receive an iterator over the data loader (build it with
    ``context.train_micro_batch_size_per_gpu`` records per batch) and draw micro batches from it.
    Unless ``context.disable_auto_grad_accumulation()`` was called, ``train_batch`` is called
    ``gradient_accumulation_steps`` times per batch, once per micro batch.

    Example::

        class MyTrial(det_ds.DeepSpeedTrial):
            def __init__(self, context):
                self.context = context
                model = Net()
                engine, _, _, _ = deepspeed.initialize(
                    model=model, model_parameters=model.parameters(), config=ds_config
                )
                self.engine = context.wrap_model_engine(engine)

            def train_batch(self, dataloader_iter, epoch_idx, batch_idx):
                x, y = self.context.to_device(next(dataloader_iter))
                loss = F.mse_loss(self.engine(x), y)
                self.engine.backward(loss)
                self.engine.step()
                return {"loss": loss}
            ...
    """

    @abc.abstractmethod
    def __init__(self, context: DeepSpeedTrialContext) -> None: ...

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader | None:
        """The training data, a ``det.pytorch.DataLoader`` of micro batches (None on workers whose
        ``ModelParallelUnit`` reads no data)."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader | None:
        """The validation data, as for :meth:`build_training_data_loader`."""

    @abc.abstractmethod
    def train_batch(
        self, dataloader_iter: Iterator[Any] | None, epoch_idx: int, batch_idx: int
    ) -> dict[str, Any] | Any:
        """Train one micro batch (or, with automatic accumulation off, a whole batch); answer its
        metrics (a dict, or a loss tensor reported as ``loss``)."""

    @abc.abstractmethod
    def evaluate_batch(self, dataloader_iter: Iterator[Any] | None, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch (averaged over batches and workers)."""

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Callbacks the Trainer calls, by a name that keys their state in checkpoints."""
        return {}

    def get_batch_length(self, batch: Any) -> int:
        """Records in ``batch`` (its first tensor's first dimension by default)."""
        first = batch[0] if isinstance(batch, list | tuple) else batch
        return int(len(first))

    def save(self, context: DeepSpeedTrialContext, path: pathlib.Path) -> None:
        """Write this worker's part of a checkpoint into ``path``: by default every wrapped engine's
        ``save_checkpoint`` under the tag ``model<i>``."""
        for i, engine in enumerate(context.models):
            engine.save_checkpoint(str(path), tag=f"model{i}")

    def load(self, context: DeepSpeedTrialContext, path: pathlib.Path) -> None:
        """Load what :meth:`save` wrote (every engine's ``load_checkpoint``)."""
        for i, engine in enumerate(context.models):
            loaded, _ = engine.load_checkpoint(str(path), tag=f"model{i}")
            if loaded is None:
                raise DetError(f"checkpoint {path.name}: no DeepSpeed checkpoint model{i} for engine {i}")
