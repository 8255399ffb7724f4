"""``DeepSpeedTrialContext``: what a DeepSpeedTrial is given: hyperparameters, config, and
``wrap_model_engine`` for the engines the Trainer checkpoints and whose batch sizes it follows."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from det_airflow.core import Context as CoreContext
from det_airflow.errors import DetError
from det_airflow.pytorch._context import PyTorchTrialContext
from det_airflow.pytorch.deepspeed._mpu import ModelParallelUnit, make_data_parallel_mpu, make_deepspeed_mpu

logger = logging.getLogger("det_airflow.pytorch.deepspeed")


class DeepSpeedTrialContext(PyTorchTrialContext):
    """Made by ``det_ds.init()``; a DeepSpeedTrial receives it in ``__init__``.

    Optimizers, LR schedulers, gradient accumulation and mixed precision belong to the DeepSpeed
    config, not to the experiment config's ``optimizations`` (those are refused) nor to this context.
    """

    def __init__(
        self,
        core_context: CoreContext,
        *,
        hparams: Mapping[str, Any],
        exp_conf: Mapping[str, Any],
        trial_seed: int,
        device: torch.device,
    ) -> None:
        optimizations = exp_conf.get("optimizations")
        optimizations = optimizations if isinstance(optimizations, Mapping) else {}
        if optimizations.get("aggregation_frequency", 1) != 1:
            raise DetError(
                "optimizations.aggregation_frequency: a DeepSpeedTrial accumulates gradients as its "
                "DeepSpeed config says (gradient_accumulation_steps); leave it at 1"
            )
        if optimizations.get("mixed_precision", "O0") != "O0":
            raise DetError(
                "optimizations.mixed_precision: a DeepSpeedTrial sets mixed precision in its DeepSpeed "
                "config (fp16 / bf16); leave it at O0"
            )
        super().__init__(
            core_context, hparams=hparams, exp_conf=exp_conf, trial_seed=trial_seed, device=device
        )
        self.models: list[Any] = []  # DeepSpeed engines
        self._mpu = make_data_parallel_mpu(self.distributed)
        self._called_set_mpu = False
        self._train_micro_batch_size_per_gpu: int | None = None
        self._num_micro_batches_per_slot: int | None = None
        self._use_pipeline_parallel = False
        self._data_repro_checks_disabled = False
        self._manual_grad_accumulation = False

    def wrap_model_engine(self, model: Any) -> Any:
        """Register a DeepSpeed engine: checkpointed by the Trainer, and the first one's micro batch
        size and gradient accumulation steps set how many micro batches make a batch."""
        import deepspeed

        model = model.to(self.device)
        if isinstance(model, deepspeed.PipelineEngine):
            self._use_pipeline_parallel = True
            if not self.models:
                self._mpu = make_deepspeed_mpu(model.mpu)
        if not self.models:
            self._train_micro_batch_size_per_gpu = int(model.train_micro_batch_size_per_gpu())
            self._num_micro_batches_per_slot = int(model.gradient_accumulation_steps())
        elif int(model.train_micro_batch_size_per_gpu()) != self._train_micro_batch_size_per_gpu:
            logger.warning(
                "engine %d has another train_micro_batch_size_per_gpu than the first: batches follow the first",
                len(self.models) + 1,
            )
        self.models.append(model)
        return model

    def set_mpu(self, mpu: ModelParallelUnit) -> None:
        """Use a model-parallel layout of the trial's own (once, after :meth:`wrap_model_engine`)."""
        if not self.models:
            raise DetError("context.set_mpu(): call context.wrap_model_engine(engine) first")
        if self._called_set_mpu:
            raise DetError("context.set_mpu() can be called once per trial")
        if not isinstance(mpu, ModelParallelUnit):
            raise DetError(f"context.set_mpu(): expected a ModelParallelUnit, got {type(mpu).__name__}")
        self._called_set_mpu = True
        self._mpu = mpu

    def disable_auto_grad_accumulation(self) -> None:
        """``train_batch`` is called once per batch, and trains all its micro batches itself."""
        self._manual_grad_accumulation = True

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow a plain torch DataLoader from the ``build_*_data_loader`` methods (not sharded, and a
        resumed trial starts its data over)."""
        self._data_repro_checks_disabled = True

    @property
    def use_pipeline_parallel(self) -> bool:
        return self._use_pipeline_parallel

    @property
    def train_micro_batch_size_per_gpu(self) -> int:
        if self._train_micro_batch_size_per_gpu is None:
            raise DetError(
                "context.train_micro_batch_size_per_gpu: call context.wrap_model_engine(engine) first"
            )
        return self._train_micro_batch_size_per_gpu

    @property
    def num_micro_batches_per_slot(self) -> int:
        if self._num_micro_batches_per_slot is None:
            raise DetError("context.num_micro_batches_per_slot: call context.wrap_model_engine(engine) first")
        return self._num_micro_batches_per_slot

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        raise DetError(
            "a DeepSpeedTrial registers engines: build one with deepspeed.initialize() and call "
            "context.wrap_model_engine(engine)"
        )

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, **_: Any) -> torch.optim.Optimizer:
        raise DetError(
            "a DeepSpeedTrial's optimizer belongs to its engine (deepspeed.initialize(optimizer=...))"
        )
