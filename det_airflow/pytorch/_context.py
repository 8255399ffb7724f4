"""``PyTorchTrialContext``: what a PyTorchTrial is given: hyperparameters, config, and the wrappers that
let the Trainer checkpoint, distribute and step what the trial builds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from det_airflow.core import Context as CoreContext
from det_airflow.core import DistributedContext
from det_airflow.errors import DetError
from det_airflow.pytorch._lr_scheduler import LRScheduler
from det_airflow.pytorch._reducer import MetricReducer, WrappedReducer, wrap


class _DistributedDataParallel(nn.parallel.DistributedDataParallel):
    """DistributedDataParallel that answers its model's own attributes too (``self.model.weight``),
    as trial code written for one worker reads them."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


class PyTorchTrialContext:
    """Made by ``det.pytorch.init()``; a PyTorchTrial receives it in ``__init__``.

    ``distributed`` is the Core API's DistributedContext and ``device`` the torch device this worker
    trains on (its GPU, else the CPU).
    """

    def __init__(
        self,
        core_context: CoreContext,
        *,
        hparams: Mapping[str, Any],
        exp_conf: Mapping[str, Any],
        trial_seed: int,
        device: torch.device,
        aggregation_frequency: int = 1,
        average_aggregated_gradients: bool = True,
    ) -> None:
        if isinstance(aggregation_frequency, bool) or not isinstance(aggregation_frequency, int):
            raise DetError(f"aggregation_frequency: expected an integer >= 1, got {aggregation_frequency!r}")
        if aggregation_frequency < 1:
            raise DetError(f"aggregation_frequency: expected an integer >= 1, got {aggregation_frequency}")
        self._aggregation_frequency = aggregation_frequency
        self._average_aggregated_gradients = bool(average_aggregated_gradients)
        self._core = core_context
        self.distributed: DistributedContext = core_context.distributed
        self.device = device
        self._hparams = dict(hparams)
        self._config = dict(exp_conf)
        self._trial_seed = int(trial_seed)
        info = core_context.info
        self._trial_id = info.trial.trial_id if info is not None else 0
        self._experiment_id = info.trial.experiment_id if info is not None else 0
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._modules: list[nn.Module] = []  # the models without their DistributedDataParallel wrapper
        self._stop_requested = False
        self._current_batch_idx: int | None = None
        self._epoch_len: int | None = None
        self._reducers: list[WrappedReducer] = []

    # --- what the trial builds -------------------------------------------------------------------

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Register a model: it moves to ``device``, is checkpointed, and with several workers is
        wrapped in DistributedDataParallel (use the returned model)."""
        model = model.to(self.device)
        self._modules.append(model)
        wrapped = model
        if self.distributed.size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = _DistributedDataParallel(model, device_ids=device_ids)
        self.models.append(wrapped)
        return wrapped

    def wrap_reducer(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a custom metric reducer; its result joins the training and/or validation metrics.

        A function ``fn(values) -> metric`` is wrapped in a reducer whose ``update(value)`` collects
        values (``name`` is then required). Answers the reducer for the trial to ``update``.
        """
        wrapped = wrap(reducer, name, for_training=for_training, for_validation=for_validation)
        self._reducers.append(wrapped)
        return wrapped.reducer

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, **_: Any) -> torch.optim.Optimizer:
        """Register an optimizer (checkpointed; step it with :meth:`step_optimizer`)."""
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self, lr_scheduler: Any, step_mode: LRScheduler.StepMode, frequency: int = 1
    ) -> Any:
        """Register a torch LR scheduler; the Trainer steps it as ``step_mode`` says and checkpoints it."""
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``: gradients add up in ``.grad`` until the optimizer steps
        (every ``aggregation_frequency`` batches) and are averaged across workers by DDP."""
        loss.backward(**kwargs)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Iterable[torch.Tensor]], None] | None = None,
        auto_zero_grads: bool = True,
    ) -> None:
        """Step ``optimizer`` (after ``clip_grads(params)`` if given), then zero its gradients.

        With ``aggregation_frequency`` N > 1 only every N-th batch steps: the other calls do nothing,
        so the gradients of N batches add up, and are divided by N first unless
        ``optimizations.average_aggregated_gradients`` is false.
        """
        if not self._should_communicate_and_update():
            return
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if self._aggregation_frequency > 1 and self._average_aggregated_gradients:
            with torch.no_grad():
                for param in parameters:
                    if param.grad is not None:
                        param.grad.div_(self._aggregation_frequency)
        if clip_grads is not None:
            clip_grads(parameters)
        optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for scheduler in self.lr_schedulers:
            if (
                scheduler.step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP
                and getattr(scheduler.scheduler, "optimizer", None) is optimizer
            ):
                scheduler._auto_step()

    def _should_communicate_and_update(self) -> bool:
        """Whether the batch being trained ends an aggregation window (always, outside training)."""
        if self._aggregation_frequency == 1 or self._current_batch_idx is None:
            return True
        return (self._current_batch_idx + 1) % self._aggregation_frequency == 0

    def get_aggregation_frequency(self) -> int:
        """Batches whose gradients add up before each optimizer step (``optimizations.aggregation_frequency``)."""
        return self._aggregation_frequency

    def to_device(self, data: Any) -> Any:
        """``data`` (tensors, possibly in dicts, lists and tuples) moved to ``device``."""
        if isinstance(data, torch.Tensor):
            return data.to(self.device, non_blocking=True)
        if isinstance(data, Mapping):
            return type(data)({k: self.to_device(v) for k, v in data.items()})  # type: ignore[call-arg]
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*(self.to_device(v) for v in data))
        if isinstance(data, list | tuple):
            return type(data)(self.to_device(v) for v in data)
        return data

    # --- what the trial reads --------------------------------------------------------------------

    def get_hparams(self) -> dict[str, Any]:
        """The trial's hyperparameters."""
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter."""
        if name not in self._hparams:
            known = ", ".join(sorted(self._hparams)) or "none"
            raise DetError(f"hyperparameter {name!r} is not in this trial's hyperparameters ({known})")
        return self._hparams[name]

    def get_global_batch_size(self) -> int:
        """The ``global_batch_size`` hyperparameter: records per batch, all workers together."""
        value = self._hparams.get("global_batch_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DetError(
                "hyperparameters.global_batch_size: expected an integer >= 1 (records per batch over "
                f"all workers), got {value!r}"
            )
        return value

    def get_per_slot_batch_size(self) -> int:
        """Records per batch on this worker: the global batch size // the number of workers
        (``slots_per_trial`` under the launcher)."""
        global_size = self.get_global_batch_size()
        if global_size < self.distributed.size:
            raise DetError(
                f"hyperparameters.global_batch_size ({global_size}) must be at least the number of "
                f"workers ({self.distributed.size})"
            )
        return global_size // self.distributed.size

    def get_data_config(self) -> dict[str, Any]:
        """The experiment config's free-form ``data`` section."""
        data = self._config.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    def get_experiment_config(self) -> dict[str, Any]:
        """The experiment config (empty off-cluster unless ``init(exp_conf=...)`` gave one)."""
        return dict(self._config)

    def get_trial_id(self) -> int:
        """The trial's id (0 off-cluster)."""
        return self._trial_id

    def get_experiment_id(self) -> int:
        """The experiment's id (0 off-cluster)."""
        return self._experiment_id

    def get_trial_seed(self) -> int:
        """The seed of this trial's random number generators and data order."""
        return self._trial_seed

    # --- training progress -----------------------------------------------------------------------

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the Trainer to stop: at the next reporting boundary it checkpoints and ends the trial
        early (reported as USER_REQUESTED_STOP)."""
        if not isinstance(stop_requested, bool):
            raise TypeError(f"set_stop_requested expects a bool, got {stop_requested!r}")
        self._stop_requested = stop_requested

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def current_train_batch(self) -> int:
        """The index of the batch being trained (batches trained before it)."""
        return self._training("current_train_batch")[0]

    def current_train_epoch(self) -> int:
        batch, epoch_len = self._training("current_train_epoch")
        return batch // epoch_len

    def is_epoch_start(self) -> bool:
        """Whether the batch being trained is the first of an epoch."""
        batch, epoch_len = self._training("is_epoch_start")
        return batch % epoch_len == 0

    def is_epoch_end(self) -> bool:
        """Whether the batch being trained is the last of an epoch."""
        batch, epoch_len = self._training("is_epoch_end")
        return (batch + 1) % epoch_len == 0

    def _training(self, what: str) -> tuple[int, int]:
        if self._current_batch_idx is None or not self._epoch_len:
            raise DetError(f"context.{what}() is only meaningful during training (in train_batch)")
        return self._current_batch_idx, self._epoch_len
