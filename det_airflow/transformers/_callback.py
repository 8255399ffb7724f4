"""``DetCallback``: a Hugging Face ``Trainer`` callback that reports to the Core API as Determined's does.

Training logs go out as training metrics at the Trainer's global step, evaluations as validation
metrics (the names as the Trainer writes them: ``loss``, ``eval_loss``...), every checkpoint the
Trainer saves is stored as a Core API checkpoint, the searcher hears when its length is reached, and
a preemption signal makes the Trainer save and stop.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import transformers
from transformers import trainer_utils

from det_airflow.core import Context, SearcherOperation
from det_airflow.errors import DetError

logger = logging.getLogger("det_airflow.transformers")

USER_DATA_FILE = "my_data.json"
"""Where ``user_data`` is written in each checkpoint folder (Determined's name, so restore code finds it)."""
TENSORBOARD_FOLDER = "runs"
"""The Trainer's TensorBoard folder under ``output_dir``, kept with every checkpoint as Determined does."""
EVALUATION_PREFIXES = ("eval_", "test_")
RUN_SUMMARY_KEY = "train_runtime"
"""Marks the log the Trainer writes once training ends (averages over the run): not a training report."""
PROGRESS_INTERVAL = 5.0
"""Seconds between progress reports, so that reporting stays off the per-step cost."""
UNITS = ("batches", "records", "epochs")


class TrainerLengthError(DetError, ValueError):
    """The Trainer's length (``max_steps`` / ``num_train_epochs``) disagrees with ``searcher.max_length``.

    Also a ValueError, the type Determined raises there."""


class DetCallback(transformers.TrainerCallback):  # type: ignore[misc]
    """Connects a ``transformers.Trainer`` to the Core API::

        with det.core.init() as core_context:
            callback = DetCallback(core_context, training_args)
            trainer = Trainer(..., args=training_args, callbacks=[callback])
            trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

    Made before the Trainer, it downloads the trial's latest checkpoint (if any) into
    ``args.output_dir`` and sets ``args.resume_from_checkpoint`` to it. ``searcher.max_length`` in
    batches must equal ``max_steps``, in epochs ``num_train_epochs`` (records are counted from the
    global batch size and not checked). ``filter_metrics`` keeps only the metrics whose names contain
    one of its strings; ``user_data`` is written as ``my_data.json`` into every checkpoint.
    """

    def __init__(
        self,
        core_context: Context,
        args: transformers.TrainingArguments,
        filter_metrics: Sequence[str] | None = None,
        user_data: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.core_context = core_context
        self.filter_metrics = list(filter_metrics) if filter_metrics else None
        self.user_data = user_data
        info = core_context.info
        self._trial_id = info.trial.trial_id if info is not None else None
        self.load_last_checkpoint(args)

        self.last_metrics: dict[str, Any] = {"train_step": -1, "eval_step": -1}
        self._last_validation: tuple[int, frozenset[str]] | None = None
        self._saved_step = -1
        self._progress_at = -math.inf
        self.updating_searcher = False
        self.searcher_ops: Iterator[SearcherOperation] = core_context.searcher.operations()
        self.current_op = next(self.searcher_ops)

        searcher = (info.trial.config or {}).get("searcher") if info is not None else None
        searcher = searcher if isinstance(searcher, Mapping) else {}
        self.searcher_metric: str | None = searcher.get("metric")
        self._records_per_step = max(
            1, args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        )
        if searcher.get("name") == "custom":
            self.searcher_unit: str | None = "batches"
            self.searcher_max_length: float | None = self.current_op.length
        else:
            self.searcher_unit, self.searcher_max_length = _searcher_length(searcher)
            self._check_trainer_length(args)

    def load_last_checkpoint(self, args: transformers.TrainingArguments) -> None:
        """Download the trial's latest checkpoint into ``args.output_dir`` and point
        ``args.resume_from_checkpoint`` at the Trainer checkpoint inside it."""
        info = self.core_context.info
        latest = info.latest_checkpoint if info is not None else None
        if latest is None:
            return
        if getattr(args, "overwrite_output_dir", False):
            logger.info("not resuming from checkpoint %s: overwrite_output_dir is set", latest)
            return
        self.core_context.checkpoint.download(latest, str(args.output_dir))
        args.resume_from_checkpoint = trainer_utils.get_last_checkpoint(str(args.output_dir))
        logger.info("resuming from checkpoint %s (%s)", latest, args.resume_from_checkpoint)

    def on_log(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Evaluations are reported from on_evaluate; the end-of-run summary repeats the run's averages.
        if not logs or RUN_SUMMARY_KEY in logs or any(key.startswith(EVALUATION_PREFIXES) for key in logs):
            return
        step = state.global_step
        if self.last_metrics["train_step"] != step:
            metrics = self._filtered(logs)
            if state.is_world_process_zero:
                self.core_context.train.report_training_metrics(steps_completed=step, metrics=metrics)
            self.last_metrics.update(metrics)
            self.last_metrics["train_step"] = step
        self._after_report(state, control)

    def on_evaluate(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        metrics: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if metrics:
            step = state.global_step
            values = self._filtered(metrics)
            # An evaluation after train() at the step of the last one is the same report again.
            seen = (step, frozenset(values))
            if seen != self._last_validation:
                if state.is_world_process_zero:
                    self.core_context.train.report_validation_metrics(steps_completed=step, metrics=values)
                self._last_validation = seen
            self.last_metrics.update(values)
            self.last_metrics["eval_step"] = step
        self._after_report(state, control)

    def on_save(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        step = state.global_step
        if step != self._saved_step and self.core_context.distributed.is_chief:
            self._store(Path(str(args.output_dir)), step)
        self._saved_step = step
        if self.core_context.preempt.should_preempt():
            control.should_training_stop = True

    def on_step_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        # state.epoch is set only while training (not in a lone evaluate()).
        if state.epoch and self.searcher_unit in ("batches", "records"):
            done = state.global_step
            if self.searcher_unit == "records":
                done *= self._records_per_step
            self._reached(done, state, control)

    def on_epoch_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        if state.epoch and self.searcher_unit == "epochs":
            self._reached(state.epoch, state, control)

    def _reached(
        self, done: float, state: transformers.TrainerState, control: transformers.TrainerControl
    ) -> None:
        length = self.current_op.length
        now = time.monotonic()
        if done >= length or now - self._progress_at >= PROGRESS_INTERVAL:
            self.current_op.report_progress(min(done, length))
            self._progress_at = now
        if done >= length and not self.updating_searcher:
            logger.info("searcher length %s %s reached: completing the operation", length, self.searcher_unit)
            self._update_searcher(state, control)

    def _after_report(self, state: transformers.TrainerState, control: transformers.TrainerControl) -> None:
        if self.updating_searcher:
            self._update_searcher(state, control)
        elif self.core_context.preempt.should_preempt():
            logger.info("preemption signal: saving a checkpoint and stopping at step %s", state.global_step)
            control.should_save = True
            control.should_training_stop = True

    def _update_searcher(
        self, state: transformers.TrainerState, control: transformers.TrainerControl
    ) -> None:
        """Complete the searcher operation with this step's metrics, asking the Trainer to log,
        evaluate and save first when they are not all in."""
        step = state.global_step
        if not (self.last_metrics["train_step"] == step and self.last_metrics["eval_step"] == step):
            control.should_log = True
            control.should_evaluate = True
            control.should_save = True
            self.updating_searcher = True
            return
        self.current_op.report_completed(self._searcher_value(state))
        self.updating_searcher = False
        try:
            self.current_op = next(self.searcher_ops)
        except StopIteration:
            control.should_training_stop = True

    def _searcher_value(self, state: transformers.TrainerState) -> Any:
        if self.searcher_metric is not None and self.searcher_metric in self.last_metrics:
            return self.last_metrics[self.searcher_metric]
        known = sorted(k for k in self.last_metrics if k not in ("train_step", "eval_step"))
        logger.warning(
            "the searcher metric %r is not among the reported metrics (%s): reporting the Trainer's "
            "best_metric (%s) instead",
            self.searcher_metric,
            ", ".join(known) or "none",
            state.best_metric,
        )
        return state.best_metric

    def _store(self, output_dir: Path, step: int) -> None:
        folder = output_dir / f"{trainer_utils.PREFIX_CHECKPOINT_DIR}-{step}"
        if not folder.is_dir():
            logger.warning("the Trainer saved no checkpoint folder at %s: nothing stored", folder)
            return
        if self.user_data is not None:
            (folder / USER_DATA_FILE).write_text(json.dumps(self.user_data), encoding="utf-8")
        metadata: dict[str, Any] = {"steps_completed": step}
        if self._trial_id is not None:
            metadata["trial_id"] = self._trial_id
        with self.core_context.checkpoint.store_path(metadata) as (path, storage_id):
            shutil.copytree(folder, path / folder.name)
            runs = output_dir / TENSORBOARD_FOLDER
            if runs.is_dir():
                shutil.copytree(runs, path / TENSORBOARD_FOLDER)
        logger.info("stored checkpoint %s (step %s)", storage_id, step)

    def _filtered(self, logs: Mapping[str, Any]) -> dict[str, Any]:
        if not self.filter_metrics:
            return dict(logs)
        return {k: v for k, v in logs.items() if any(part in k for part in self.filter_metrics)}

    def _check_trainer_length(self, args: transformers.TrainingArguments) -> None:
        unit, length = self.searcher_unit, self.searcher_max_length
        if unit == "batches":
            if args.max_steps <= 0:
                self._mismatch("epochs", args.num_train_epochs)
            elif args.max_steps != length:
                self._mismatch("batches", args.max_steps)
        elif unit == "epochs":
            if args.max_steps > 0:
                self._mismatch("batches", args.max_steps)
            elif args.num_train_epochs != length:
                self._mismatch("epochs", args.num_train_epochs)

    def _mismatch(self, trainer_unit: str, trainer_length: float) -> None:
        setting = "max_steps" if self.searcher_unit == "batches" else "num_train_epochs"
        raise TrainerLengthError(
            f"the Trainer trains {trainer_unit}={trainer_length:g} but searcher.max_length is "
            f"{self.searcher_unit}={self.searcher_max_length:g}: set TrainingArguments "
            f"{setting}={self.searcher_max_length:g}"
            + (" (and leave max_steps at -1)" if setting == "num_train_epochs" else "")
        )


def _searcher_length(searcher: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """``(unit, value)`` of ``searcher.max_length`` as written (``{batches: N}``) or normalized
    (``{unit, value}``); ``(None, None)`` for a time-bound or unset length."""
    length = searcher.get("max_length")
    if not isinstance(length, Mapping):
        return None, None
    if "unit" in length and "value" in length:
        unit = str(length["unit"]).lower()
        return (unit, float(length["value"])) if unit in UNITS else (None, None)
    for unit in UNITS:
        if unit in length:
            return unit, float(length[unit])
    return None, None
