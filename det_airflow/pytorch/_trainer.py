"""``Trainer``: drives a PyTorchTrial: the training loop, metrics, validation, checkpoints, preemption
and resume, with the experiment config's settings as defaults."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from det_airflow.core import EarlyExitReason
from det_airflow.errors import DetError
from det_airflow.pytorch import _state
from det_airflow.pytorch._callback import PyTorchCallback
from det_airflow.pytorch._config import CHECKPOINT_POLICIES, ConfigDefaults, read_defaults
from det_airflow.pytorch._context import PyTorchTrialContext
from det_airflow.pytorch._data import DataLoader
from det_airflow.pytorch._lr_scheduler import LRScheduler
from det_airflow.pytorch._metrics import MetricAverager, average
from det_airflow.pytorch._period import Batch, TrainUnit, period_in_batches
from det_airflow.pytorch._reducer import reduce_all
from det_airflow.pytorch._trial import PyTorchTrial

logger = logging.getLogger("det_airflow.pytorch")


@dataclass(frozen=True)
class _Plan:
    """fit()'s arguments with the config's defaults filled in."""

    max_length: TrainUnit | None  # None: train to the lengths of the searcher's operations
    reporting_period: TrainUnit
    validation_period: TrainUnit | None
    checkpoint_period: TrainUnit | None
    checkpoint_policy: str
    step_zero_validation: bool
    test_mode: bool
    latest_checkpoint: str | None


class Trainer:
    """Trains a PyTorchTrial (docs/semantics.md §3).

    Example::

        with det.pytorch.init() as context:
            trial = MyTrial(context)
            det.pytorch.Trainer(trial, context).fit(max_length=det.pytorch.Epoch(5))
    """

    # What the Trainer drives and how a trial registers its model (the DeepSpeed Trainer's differ).
    _trial_class: type = PyTorchTrial
    _wrap_call = "context.wrap_model(model)"

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        if not isinstance(trial, self._trial_class):
            raise DetError(f"Trainer needs a {self._trial_class.__name__}, got {type(trial).__name__}")
        if not context.models:
            raise DetError(f"{type(trial).__name__} wrapped no model: call {self._wrap_call} in its __init__")
        self._trial = trial
        self._context = context
        self._core = context._core
        self._dist = context.distributed
        self._defaults: ConfigDefaults = read_defaults(context._config, context._hparams)
        self._evaluate_full = _overrides(trial, self._trial_class, "evaluate_full_dataset")
        if self._evaluate_full == _overrides(trial, self._trial_class, "evaluate_batch"):
            raise DetError(
                f"{type(trial).__name__} must define exactly one of evaluate_batch() and "
                "evaluate_full_dataset()"
            )
        self._evaluate_takes_idx = (
            not self._evaluate_full and len(inspect.signature(trial.evaluate_batch).parameters) >= 2
        )
        # Training state; set up by fit().
        self._batches = 0
        self._epoch_len = 1
        self._report_every = 1
        self._validate_every: int | None = None
        self._checkpoint_every: int | None = None
        self._policy = "best"
        self._test_mode = False
        self._target = 0
        self._train_iter: Iterator[Any] = iter(())
        self._validation_loader: Any = None
        self._last_checkpoint: int | None = None
        self._last_validation: tuple[int, dict[str, Any]] | None = None
        self._training_metrics = MetricAverager()
        self._used = False
        callbacks = trial.build_callbacks()
        bad = {name: cb for name, cb in callbacks.items() if not isinstance(cb, PyTorchCallback)}
        if bad:
            name, cb = next(iter(bad.items()))
            raise DetError(
                f"build_callbacks()[{name!r}]: expected a det.pytorch.PyTorchCallback, got {type(cb).__name__}"
            )
        self._callbacks: dict[str, PyTorchCallback] = dict(callbacks)

    def fit(
        self,
        checkpoint_period: TrainUnit | None = None,
        validation_period: TrainUnit | None = None,
        max_length: TrainUnit | None = None,
        reporting_period: TrainUnit | None = None,
        checkpoint_policy: str | None = None,
        latest_checkpoint: str | None = None,
        step_zero_validation: bool | None = None,
        test_mode: bool | None = None,
        profiling_enabled: bool | None = None,
    ) -> None:
        """Train to ``max_length``, validating, reporting and checkpointing on the way.

        Every argument left out comes from the experiment config: ``max_length`` from
        ``searcher.max_length`` (trained to through the searcher's operations, *seed* era) or from
        ``max_time`` with ``time_metric: batches|epochs``; ``validation_period`` and
        ``checkpoint_period`` from ``min_validation_period`` / ``min_checkpoint_period`` (else
        validation at the end only, no periodic checkpoints); ``reporting_period`` from
        ``scheduling_unit`` (100 batches); ``checkpoint_policy`` (``best``: after validations that
        beat the experiment's best; ``all``; ``none``); ``step_zero_validation`` from
        ``perform_initial_validation``; ``latest_checkpoint`` (resume from it) from the trial's
        latest checkpoint; ``test_mode`` from local test mode (one batch, one validation, one
        checkpoint).

        At every reporting, validation and checkpoint boundary the Trainer asks whether to stop
        (pause, cancel, preemption, a searcher's stop): if so it checkpoints and returns, and the
        trial resumes later from that checkpoint exactly where it left off. It always validates at
        the end of training, and checkpoints there unless the policy is ``none``.

        The parameters are in Determined's order, so positional calls bind as they do there.
        ``profiling_enabled`` is accepted; det-airflow does not collect profiles.
        """
        if self._used:
            raise DetError("Trainer.fit() can be called once per Trainer")
        self._used = True
        if profiling_enabled:
            logger.warning("Trainer.fit(profiling_enabled=True): profiling is not collected by det-airflow")
        plan = self._make_plan(
            max_length=max_length,
            validation_period=validation_period,
            checkpoint_period=checkpoint_period,
            reporting_period=reporting_period,
            checkpoint_policy=checkpoint_policy,
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation,
            test_mode=test_mode,
        )
        try:
            if self._run(plan) and (self._policy != "none" or self._test_mode):
                if self._last_checkpoint != self._batches:
                    self._checkpoint(self._batches)
        finally:
            self._hook("on_trial_shutdown")

    def _hook(self, name: str, *args: Any) -> None:
        for callback in self._callbacks.values():
            getattr(callback, name)(*args)

    # --- setup ---------------------------------------------------------------------------------

    def _make_plan(
        self,
        *,
        max_length: TrainUnit | None,
        validation_period: TrainUnit | None,
        checkpoint_period: TrainUnit | None,
        reporting_period: TrainUnit | None,
        checkpoint_policy: str | None,
        latest_checkpoint: str | None,
        step_zero_validation: bool | None,
        test_mode: bool | None,
    ) -> _Plan:
        defaults = self._defaults
        testing = self._core.test_mode if test_mode is None else bool(test_mode)
        if max_length is not None and not isinstance(max_length, TrainUnit):
            raise DetError(f"max_length: expected Batch(n) or Epoch(n), got {max_length!r}")
        if testing:
            follow_searcher = max_length is None and defaults.searcher_length_unit is not None
            max_length = None if follow_searcher else Batch(1)
        elif max_length is None and defaults.searcher_length_unit is None:
            max_length = defaults.max_time
            if max_length is None:
                raise DetError(
                    "Trainer.fit(): no training length: pass max_length=Batch(n) or Epoch(n), or give "
                    "the experiment config searcher.max_length (or time_metric batches or epochs with "
                    "max_time)"
                )
        policy = defaults.checkpoint_policy if checkpoint_policy is None else checkpoint_policy
        if policy not in CHECKPOINT_POLICIES:
            raise DetError(f"checkpoint_policy: expected one of best, all, none, got {policy!r}")
        if step_zero_validation is None:
            step_zero_validation = defaults.step_zero_validation
        info = self._core.info
        return _Plan(
            max_length=max_length,
            reporting_period=reporting_period or defaults.reporting_period,
            validation_period=validation_period or defaults.validation_period,
            checkpoint_period=checkpoint_period or defaults.checkpoint_period,
            checkpoint_policy=policy,
            step_zero_validation=bool(step_zero_validation) and not testing,
            test_mode=testing,
            latest_checkpoint=latest_checkpoint or (info.latest_checkpoint if info is not None else None),
        )

    def _run(self, plan: _Plan) -> bool:
        """Train as planned; False when training stopped early (preemption, a stop request)."""
        self._policy, self._test_mode = plan.checkpoint_policy, plan.test_mode
        rng = self._restore(plan.latest_checkpoint) if plan.latest_checkpoint else None
        # Data loaders run user code that may draw random numbers: built before the generators are set.
        self._build_data()
        self._report_every = (
            period_in_batches(plan.reporting_period, self._epoch_len, name="reporting_period") or 1
        )
        self._validate_every = period_in_batches(
            plan.validation_period, self._epoch_len, name="validation_period"
        )
        self._checkpoint_every = period_in_batches(
            plan.checkpoint_period, self._epoch_len, name="checkpoint_period"
        )
        if rng is not None:
            _state.set_rng_state(rng)
        self._hook("on_trial_startup", self._batches, plan.latest_checkpoint)
        for model in self._context.models:
            model.train()
        self._hook("on_training_start")
        if plan.step_zero_validation and self._batches == 0:
            self._validate(0)
        if plan.max_length is not None:
            return self._train_to(plan.max_length.to_batches(self._epoch_len))
        unit = self._defaults.searcher_length_unit
        assert unit is not None
        for op in self._core.searcher.operations():
            if plan.test_mode:
                target = 1
            else:
                length = self._defaults.unit_length(unit, op.length, where="searcher.max_length")
                target = length.to_batches(self._epoch_len)
            if not self._train_to(target):
                return False
            op.report_completed(self._searcher_metric(self._validation_at(target)))
        return True

    def _build_data(self) -> None:
        context, dist = self._context, self._dist
        train = self._trial.build_training_data_loader()
        validation = self._trial.build_validation_data_loader()
        if isinstance(train, DataLoader):
            self._epoch_len = train.epoch_length(dist.size)
            loader = train.get_data_loader(
                repeat=True,
                skip=self._batches,
                num_replicas=dist.size,
                rank=dist.rank,
                seed=context.get_trial_seed(),
            )
            self._train_iter = iter(loader)
        elif isinstance(train, torch.utils.data.DataLoader):
            logger.warning(
                "build_training_data_loader() returned a torch DataLoader: it is not sharded across "
                "workers and a resumed trial cannot start at the exact batch; return a "
                "det.pytorch.DataLoader instead"
            )
            self._epoch_len = len(train)
            self._train_iter = _repeat_from(train, self._batches)
        else:
            raise DetError(
                "build_training_data_loader() must return a det.pytorch.DataLoader, "
                f"got {type(train).__name__}"
            )
        if self._epoch_len < 1:
            raise DetError("the training data loader has no batches")
        context._epoch_len = self._epoch_len
        if isinstance(validation, DataLoader):
            if self._evaluate_full:  # the chief evaluates all of it
                self._validation_loader = validation.get_data_loader(seed=context.get_trial_seed())
            else:
                self._validation_loader = validation.get_data_loader(
                    num_replicas=dist.size, rank=dist.rank, seed=context.get_trial_seed()
                )
        elif isinstance(validation, torch.utils.data.DataLoader):
            self._validation_loader = validation
        else:
            raise DetError(
                "build_validation_data_loader() must return a det.pytorch.DataLoader, "
                f"got {type(validation).__name__}"
            )

    def _restore(self, storage_id: str) -> dict[str, Any] | None:
        """Load the checkpoint's state; answers this worker's random generator state (set later)."""
        context = self._context
        with self._core.checkpoint.restore_path(storage_id) as path:
            trainer, rng_states, saved = _state.load(
                path,
                models=context._modules,
                optimizers=context.optimizers,
                lr_schedulers=context.lr_schedulers,
                on_load_start=lambda state: self._hook("on_checkpoint_load_start", state),
            )
        callback_states = saved.get("callbacks") or {}
        for name, callback in self._callbacks.items():
            if name in callback_states:
                callback.load_state_dict(callback_states[name])
        self._batches = self._last_checkpoint = int(trainer["batches_trained"])
        logger.info("resumed from checkpoint %s at batch %d", storage_id, self._batches)
        if len(rng_states) != self._dist.size:
            logger.warning(
                "the checkpoint was saved by %d workers and %d resume it: random generators start fresh",
                len(rng_states),
                self._dist.size,
            )
            return None
        return rng_states[self._dist.rank]

    # --- the loop ------------------------------------------------------------------------------

    def _train_to(self, target: int) -> bool:
        """Train until ``target`` batches; False when told to stop on the way."""
        self._target = target
        if self._batches >= target:  # resumed at (or past) the end: only the final validation is missing
            self._validation_at(self._batches)
            return True
        context = self._context
        epoch_len = self._epoch_len
        batch_schedulers = self._schedulers(LRScheduler.StepMode.STEP_EVERY_BATCH)
        epoch_schedulers = self._schedulers(LRScheduler.StepMode.STEP_EVERY_EPOCH)
        batches = self._batches
        while batches < target:
            boundary = self._next_boundary(batches, target)
            # The hot loop: nothing here talks to the master or waits for the device.
            while batches < boundary:
                if batches % epoch_len == 0:
                    self._hook("on_training_epoch_start", batches // epoch_len)
                context._current_batch_idx = batches
                self._train_batch(batches // epoch_len, batches)
                batches += 1
                self._batches = batches
                for scheduler in batch_schedulers:
                    scheduler._auto_step()
                if batches % epoch_len == 0:
                    for scheduler in epoch_schedulers:
                        scheduler._auto_step()
                    self._hook("on_training_epoch_end", batches // epoch_len - 1)
            if not self._at_boundary(batches, target):
                return False
        return True

    def _train_batch(self, epoch_idx: int, batch_idx: int) -> None:
        """Train one batch and collect its metrics."""
        context = self._context
        batch = next(self._train_iter)
        if context.device.type != "cpu":
            batch = context.to_device(batch)
        with self._gradient_sync():
            batch_metrics = self._trial.train_batch(batch, epoch_idx, batch_idx)
        self._training_metrics.add(batch_metrics, where="train_batch()")

    def _gradient_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Inside an aggregation window DDP keeps gradients local (``no_sync``, forward included):
        workers exchange them once, for the batch whose optimizer step applies them."""
        if self._dist.size == 1 or self._context._should_communicate_and_update():
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        for model in self._context.models:
            if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                stack.enter_context(model.no_sync())
        return stack

    def _next_boundary(self, batches: int, target: int) -> int:
        boundary = target
        for period in (self._report_every, self._validate_every, self._checkpoint_every):
            if period:
                boundary = min(boundary, (batches // period + 1) * period)
        return boundary

    def _at_boundary(self, batches: int, target: int) -> bool:
        """Report, validate and checkpoint as due; False when training must stop here."""
        at_end = batches == target
        if at_end or batches % self._report_every == 0:
            self._report_training(batches)
        checkpoint = False
        if at_end or (self._validate_every and batches % self._validate_every == 0):
            checkpoint = self._validate(batches)
        if self._checkpoint_every and batches % self._checkpoint_every == 0:
            checkpoint = True
        if checkpoint:
            self._checkpoint(batches)
        if at_end:  # the end of an operation: its completion comes first
            return True
        if self._stop_requested():
            logger.info("stop requested by the trial at batch %d: checkpointing and stopping", batches)
            self._exit(batches)
            self._core.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
            return False
        if self._core.preempt.should_preempt():
            logger.info("asked to stop at batch %d: checkpointing, to resume later from there", batches)
            self._exit(batches)
            return False
        return True

    def _exit(self, batches: int) -> None:
        self._report_training(batches)
        if self._last_checkpoint != batches:
            self._checkpoint(batches)

    def _stop_requested(self) -> bool:
        requested = self._context._stop_requested
        if self._dist.size > 1:
            requested = any(self._dist.allgather(requested))
        return requested

    def _schedulers(self, mode: LRScheduler.StepMode) -> list[LRScheduler]:
        return [s for s in self._context.lr_schedulers if s.step_mode is mode]

    # --- metrics and validation ----------------------------------------------------------------

    def _time(self, batches: int) -> dict[str, int]:
        """What ``time_metric`` reads: batches and (completed) epochs trained."""
        return {"batches": batches, "epochs": batches // self._epoch_len}

    def _report_training(self, batches: int) -> None:
        if not self._training_metrics:
            return
        metrics = average(self._training_metrics, self._dist)
        metrics.update(reduce_all([r for r in self._context._reducers if r.for_training], self._dist))
        metrics.update(self._time(batches))
        self._core.train.report_training_metrics(batches, metrics)
        self._hook("on_training_workload_end", metrics, None)

    def _validation_at(self, batches: int) -> dict[str, Any]:
        """The validation metrics at ``batches``, validating now unless done already."""
        if self._last_validation is None or self._last_validation[0] != batches:
            if self._validate(batches) and self._last_checkpoint != batches:
                self._checkpoint(batches)
        assert self._last_validation is not None
        return self._last_validation[1]

    def _validate(self, batches: int) -> bool:
        """Validate and report; answers whether the checkpoint policy wants a checkpoint now."""
        reducers = [r for r in self._context._reducers if r.for_validation]
        for wrapped in reducers:
            wrapped.reducer.reset()
        self._hook("on_validation_start")
        metrics = self._evaluate()
        metrics.update(reduce_all(reducers, self._dist))
        metrics.update(self._time(batches))
        self._hook("on_validation_end", metrics)
        policy = self._policy
        best = None
        if policy == "best" and self._dist.is_chief:
            best = self._core.train.get_experiment_best_validation()  # before this report counts
        self._core.train.report_validation_metrics(batches, metrics)
        self._last_validation = (batches, metrics)
        if self._dist.is_chief:
            logger.info("validation at batch %d: %s", batches, metrics)
            if self._target:
                self._core.train.report_progress(batches / self._target)
        if policy == "all":
            return True
        if policy == "none":
            return False
        if self._defaults.metric is None:
            return False  # off-cluster without a config: no metric to say what is best
        beats = self._beats(self._searcher_metric(metrics), best) if self._dist.is_chief else None
        return bool(self._dist.broadcast(beats))

    def _evaluate(self) -> dict[str, Any]:
        trial, context, dist = self._trial, self._context, self._dist
        models = context.models
        for model in models:
            model.eval()
        try:
            with torch.no_grad():
                if self._evaluate_full:
                    metrics = None
                    if dist.is_chief:
                        averager = MetricAverager()
                        averager.add(
                            trial.evaluate_full_dataset(self._validation_loader),
                            where="evaluate_full_dataset()",
                        )
                        metrics = average(averager)
                    return dict(dist.broadcast(metrics))
                averager = MetricAverager()
                move = context.device.type != "cpu"
                for batch_idx, batch in enumerate(self._validation_loader):
                    if move:
                        batch = context.to_device(batch)
                    if self._evaluate_takes_idx:
                        result = trial.evaluate_batch(batch, batch_idx)
                    else:
                        result = trial.evaluate_batch(batch)  # type: ignore[call-arg]
                    averager.add(result, where="evaluate_batch()")
                return average(averager, dist)
        finally:
            for model in models:
                model.train()

    def _searcher_metric(self, metrics: dict[str, Any]) -> Any:
        name = self._defaults.metric
        if name is None:
            return None
        if name not in metrics:
            reported = ", ".join(sorted(metrics)) or "none"
            raise DetError(
                f"searcher.metric {name!r} is not among the validation metrics the trial reports "
                f"({reported}); return it from evaluate_batch() or evaluate_full_dataset()"
            )
        return metrics[name]

    def _beats(self, value: Any, best: float | None) -> bool:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return False
        if math.isnan(number):
            return False
        if best is None:
            return True
        return number < best if self._defaults.smaller_is_better else number > best

    # --- checkpoints ---------------------------------------------------------------------------

    def _checkpoint(self, batches: int) -> None:
        context, dist = self._context, self._dist
        rng_states = dist.gather(_state.rng_state())
        if dist.is_chief:
            assert rng_states is not None
            metadata = {
                "steps_completed": batches,
                "format": _state.FORMAT,
                "framework": f"torch-{torch.__version__}",
            }
            extra: dict[str, Any] = {
                "callbacks": {name: cb.state_dict() for name, cb in self._callbacks.items()}
            }
            self._hook("on_checkpoint_save_start", extra)
            with self._core.checkpoint.store_path(metadata) as (path, storage_id):
                _state.save(
                    path,
                    models=context._modules,
                    optimizers=context.optimizers,
                    lr_schedulers=context.lr_schedulers,
                    rng_states=rng_states,
                    trainer={
                        "batches_trained": batches,
                        "epochs_trained": batches // self._epoch_len,
                        "epoch_length": self._epoch_len,
                    },
                    extra=extra,
                )
                self._hook("on_checkpoint_write_end", str(path))
                self._hook("on_checkpoint_end", str(path))
            self._hook("on_checkpoint_upload_end", storage_id)
            logger.info("checkpoint %s saved at batch %d", storage_id, batches)
        self._last_checkpoint = batches


def _overrides(trial: Any, base: type, name: str) -> bool:
    return getattr(type(trial), name, None) is not getattr(base, name, None)


def _repeat_from(loader: torch.utils.data.DataLoader[Any], skip: int) -> Iterator[Any]:
    """A torch DataLoader's batches epoch after epoch, the first ``skip`` of them left out."""
    first = skip % max(len(loader), 1)
    epoch = iter(loader)
    yield from itertools.islice(epoch, first, None)
    while True:
        yield from loader
