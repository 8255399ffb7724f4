"""``PyTorchTrial``: training code as a class the Trainer drives (legacy ``entrypoint: model_def:MyTrial``)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from det_airflow.pytorch._callback import PyTorchCallback
    from det_airflow.pytorch._context import PyTorchTrialContext
    from det_airflow.pytorch._data import DataLoader


class PyTorchTrial(abc.ABC):
    """Subclass it: build and wrap the model and optimizer in ``__init__``, say how to train one batch
    and how to evaluate; the Trainer does the loop, metrics, checkpoints, preemption and resume.

    Define exactly one of :meth:`evaluate_batch` (run on every worker's share of the validation
    data, metrics averaged over batches) and :meth:`evaluate_full_dataset` (the chief only, all of it).

    Example::

        class MyTrial(det.pytorch.PyTorchTrial):
            def __init__(self, context):
                self.context = context
                self.model = context.wrap_model(Net())
                self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))

            def train_batch(self, batch, epoch_idx, batch_idx):
                x, y = batch
                loss = F.cross_entropy(self.model(x), y)
                self.context.backward(loss)
                self.context.step_optimizer(self.optimizer)
                return {"loss": loss}
            ...
    """

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None: ...

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader:
        """The training data: a ``det.pytorch.DataLoader`` (a torch DataLoader works, but cannot
        resume at the exact batch)."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader:
        """The validation data, as for :meth:`build_training_data_loader`."""

    @abc.abstractmethod
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        """Train one batch (forward, ``context.backward``, ``context.step_optimizer``); answer its
        metrics (tensors or numbers; averaged over each reporting period)."""

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch (``batch_idx`` may be left out of the signature)."""
        raise NotImplementedError

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        """Metrics of the whole validation set, computed from its torch DataLoader."""
        raise NotImplementedError

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Callbacks the Trainer calls, by a name that keys their state in checkpoints."""
        return {}
