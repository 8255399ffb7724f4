"""``Trainer`` for a DeepSpeedTrial: det.pytorch's loop, reporting and checkpoint policy, with micro
batches drawn by the trial from an iterator and checkpoints written by DeepSpeed on every worker."""

from __future__ import annotations

import logging
from typing import Any

import torch

from det_airflow.errors import DetError
from det_airflow.pytorch import _state
from det_airflow.pytorch._data import DataLoader
from det_airflow.pytorch._metrics import MetricAverager, average
from det_airflow.pytorch._trainer import Trainer as PyTorchTrainer
from det_airflow.pytorch.deepspeed._context import DeepSpeedTrialContext
from det_airflow.pytorch.deepspeed._trial import DeepSpeedTrial

logger = logging.getLogger("det_airflow.pytorch.deepspeed")

FORMAT = "deepspeed"


def _state_file(rank: int) -> str:
    return f"det_state_dict_rank{rank}.pth"


class Trainer(PyTorchTrainer):
    """Trains a DeepSpeedTrial; ``fit()`` takes the arguments (and config defaults) of
    ``det.pytorch.Trainer.fit``.

    Example::

        with det_ds.init() as context:
            det_ds.Trainer(MyTrial(context), context).fit(max_length=det.pytorch.Batch(100))
    """

    _trial_class = DeepSpeedTrial
    _wrap_call = "context.wrap_model_engine(engine)"
    _context: DeepSpeedTrialContext
    _trial: DeepSpeedTrial  # type: ignore[assignment]

    def __init__(self, trial: DeepSpeedTrial, context: DeepSpeedTrialContext) -> None:
        if not isinstance(context, DeepSpeedTrialContext):
            raise DetError(
                f"the DeepSpeed Trainer needs a DeepSpeedTrialContext, got {type(context).__name__}"
            )
        super().__init__(trial, context)  # type: ignore[arg-type]
        self._validation_batches = 0

    def _micro_batches(self) -> int:
        return self._context.num_micro_batches_per_slot

    def _build_data(self) -> None:
        context = self._context
        mpu = context._mpu
        micro = 1 if context.use_pipeline_parallel else self._micro_batches()
        train: Any = self._trial.build_training_data_loader() if mpu.should_build_data_loader else None
        validation: Any = self._trial.build_validation_data_loader() if mpu.should_build_data_loader else None
        for name, loader in (("training", train), ("validation", validation)):
            if loader is None or isinstance(loader, DataLoader):
                continue
            if not (context._data_repro_checks_disabled and isinstance(loader, torch.utils.data.DataLoader)):
                raise DetError(
                    f"build_{name}_data_loader() must return a det.pytorch.DataLoader (or, after "
                    "context.disable_dataset_reproducibility_checks(), a torch DataLoader), "
                    f"got {type(loader).__name__}"
                )
        replicas, rank, seed = mpu.data_parallel_world_size, mpu.data_parallel_rank, context.get_trial_seed()
        micro_per_batch = self._micro_batches()
        epoch_micro = 0
        if isinstance(train, DataLoader):
            epoch_micro = train.epoch_length(replicas)
            it = train.get_data_loader(
                repeat=True, skip=self._batches * micro_per_batch, num_replicas=replicas, rank=rank, seed=seed
            )
            self._train_iter = iter(_forever(it))
        elif train is not None:
            epoch_micro = len(train)
            self._train_iter = iter(_forever(train))
        # Workers without data learn the epoch's length from those with.
        epoch_micro = (
            max(int(n) for n in self._dist.allgather(epoch_micro)) if self._dist.size > 1 else epoch_micro
        )
        self._epoch_len = epoch_micro // micro_per_batch
        if self._epoch_len < 1:
            raise DetError(
                f"the training data loader has {epoch_micro} micro batches per worker, fewer than one batch "
                f"of {micro_per_batch} (gradient_accumulation_steps)"
            )
        context._epoch_len = self._epoch_len
        val_loader: Any = validation
        if isinstance(validation, DataLoader):
            val_loader = validation.get_data_loader(num_replicas=replicas, rank=rank, seed=seed)
        self._validation_loader = val_loader
        count = len(val_loader) // micro if val_loader is not None else 0
        self._validation_batches = (
            max(int(n) for n in self._dist.allgather(count)) if self._dist.size > 1 else count
        )

    def _train_batch(self, epoch_idx: int, batch_idx: int) -> None:
        context = self._context
        calls = (
            1 if context.use_pipeline_parallel or context._manual_grad_accumulation else self._micro_batches()
        )
        iterator = self._train_iter if context._mpu.should_build_data_loader else None
        for _ in range(calls):
            metrics = self._trial.train_batch(iterator, epoch_idx, batch_idx)
            if context._mpu.should_report_metrics:
                self._training_metrics.add(metrics, where="train_batch()")

    def _evaluate(self) -> dict[str, Any]:
        context = self._context
        for model in context.models:
            model.eval()
        try:
            averager = MetricAverager()
            iterator = iter(self._validation_loader) if self._validation_loader is not None else None
            batches = 1 if self._test_mode else self._validation_batches
            with torch.no_grad():
                for idx in range(batches):
                    metrics = self._trial.evaluate_batch(iterator, idx)
                    if context._mpu.should_report_metrics:
                        averager.add(metrics, where="evaluate_batch()")
            return average(averager, self._dist)
        finally:
            for model in context.models:
                model.train()

    def _checkpoint(self, batches: int) -> None:
        dist = self._dist
        metadata = {"steps_completed": batches, "format": FORMAT, "framework": f"torch-{torch.__version__}"}
        state: dict[str, Any] = {
            "trainer": {
                "batches_trained": batches,
                "epochs_trained": batches // self._epoch_len,
                "epoch_length": self._epoch_len,
            },
            "rng_state": _state.rng_state(),
            "callbacks": {name: cb.state_dict() for name, cb in self._callbacks.items()},
        }
        self._hook("on_checkpoint_save_start", state)
        with self._core.checkpoint.store_path(metadata, shard=True) as (path, storage_id):
            self._trial.save(self._context, path)
            torch.save(state, path / _state_file(dist.rank))
            self._hook("on_checkpoint_write_end", str(path))
            self._hook("on_checkpoint_end", str(path))
        self._hook("on_checkpoint_upload_end", storage_id)
        if dist.is_chief:
            logger.info("checkpoint %s saved at batch %d", storage_id, batches)
        self._last_checkpoint = batches

    def _restore(self, storage_id: str) -> dict[str, Any] | None:
        rank = self._dist.rank
        with self._core.checkpoint.restore_path(storage_id) as path:
            state_path = path / _state_file(rank)
            if not state_path.is_file():
                raise DetError(
                    f"checkpoint {storage_id} was not written by a DeepSpeedTrial worker of rank {rank} "
                    f"(no {state_path.name})"
                )
            state = torch.load(state_path, map_location="cpu", weights_only=False)
            self._hook("on_checkpoint_load_start", state)
            self._trial.load(self._context, path)
        callback_states = state.get("callbacks") or {}
        for name, callback in self._callbacks.items():
            if name in callback_states:
                callback.load_state_dict(callback_states[name])
        self._batches = self._last_checkpoint = int(state["trainer"]["batches_trained"])
        if self._dist.is_chief:
            logger.info("resumed from checkpoint %s at batch %d", storage_id, self._batches)
        rng = state.get("rng_state")
        return rng if isinstance(rng, dict) else None


def _forever(loader: Any) -> Any:
    while True:
        yield from loader
