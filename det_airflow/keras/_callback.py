"""``DeterminedCallback``: a Keras callback that reports ``model.fit()`` to the Core API as Determined's does.

Training metrics go out every epoch (or every N batches), validation metrics after each validation,
a checkpoint (the model's weights plus the callback's own state) is stored every epoch or every
``checkpoint_epochs`` and when training ends, a checkpoint of the same ``continue_id`` resumes at
the epoch after the one it saved, the searcher's length (``searcher.max_length`` in epochs, batches
or records) ends training, and a preemption signal stops it at the next epoch boundary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import keras

from det_airflow.core import Context, DistributedContext, SearcherOperation
from det_airflow.errors import DetError

logger = logging.getLogger("det_airflow.keras")

CHECKPOINT_WEIGHTS = "model_checkpoint.weights.h5"
"""The weights file in every checkpoint: ``model.load_weights(path / CHECKPOINT_WEIGHTS)`` restores a
model from a downloaded checkpoint (Keras 3 names weights files ``*.weights.h5``)."""
STATE_FILE = "callback_state.json"
"""The callback's own state in every checkpoint: the epoch it ended, batches trained, continue_id."""
VALIDATION_PREFIX = "val_"
PROGRESS_INTERVAL = 5.0
"""Seconds between searcher progress reports within an epoch, to keep reporting off the batch cost."""
_UNITS = ("batches", "records", "epochs")


class DeterminedCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Adds Determined's reporting, checkpointing, pausing and resuming to ``model.fit()``::

        with det.core.init() as core_context:
            info = det.get_cluster_info()
            callback = det.keras.DeterminedCallback(
                core_context,
                checkpoint=info.latest_checkpoint if info else None,
                continue_id=info.trial.trial_id if info else 0,
            )
            model.fit(x, y, epochs=10, validation_data=(vx, vy), callbacks=[callback])

    ``checkpoint`` is a checkpoint to start from. When its ``continue_id`` is this one, training goes
    on at the epoch after the checkpoint's (``model.fit``'s ``initial_epoch`` is overridden); with
    another id only the weights are loaded and training starts at epoch 0 (a warm start).
    ``train_metrics_report_period`` is ``"epoch"`` or a number of batches. ``checkpoint_epochs`` N
    stores a checkpoint every N epochs (0: only when training ends or is preempted). Validation
    metrics are reported under Keras's evaluation names (``loss``, ``accuracy``), and under the
    searcher's metric name too when it is written as in ``fit``'s logs (``val_loss``). Do not combine with Keras's
    ``BackupAndRestore`` or ``ModelCheckpoint``. Override :meth:`save_model` and :meth:`load_model`
    to change how the model is written and read.
    """

    def __init__(
        self,
        core_context: Context,
        checkpoint: str | None,
        continue_id: int | str,
        *,
        train_metrics_report_period: int | str = "epoch",
        checkpoint_epochs: int = 1,
    ) -> None:
        super().__init__()
        if train_metrics_report_period != "epoch" and not (
            isinstance(train_metrics_report_period, int)
            and not isinstance(train_metrics_report_period, bool)
            and train_metrics_report_period > 0
        ):
            raise DetError(
                'DeterminedCallback: train_metrics_report_period must be "epoch" or a number of '
                f"batches >= 1, got {train_metrics_report_period!r}"
            )
        if (
            isinstance(checkpoint_epochs, bool)
            or not isinstance(checkpoint_epochs, int)
            or checkpoint_epochs < 0
        ):
            raise DetError(
                f"DeterminedCallback: checkpoint_epochs must be an integer >= 0, got {checkpoint_epochs!r}"
            )
        self._core = core_context
        self._checkpoint = checkpoint
        self._continue_id = continue_id
        self._report_period = train_metrics_report_period
        self._checkpoint_epochs = checkpoint_epochs
        self._is_chief = core_context.distributed.is_chief

        self._steps_completed = 0
        self._last_train_epoch = -1
        self._last_ckpt_epoch = -1
        self._validation: dict[str, Any] = {}

        info = core_context.info
        config = info.trial.config if info is not None and info.trial.config else {}
        searcher = config.get("searcher") if isinstance(config, Mapping) else None
        searcher = searcher if isinstance(searcher, Mapping) else {}
        self._searcher_metric: str | None = str(searcher["metric"]) if searcher.get("metric") else None
        # Off-cluster there is no searcher to obey: model.fit's epochs decide.
        self._unit = _length_unit(searcher.get("max_length")) if info is not None else None
        self._records_per_batch = 0
        if self._unit == "records":
            gbs = (info.trial.hparams or {}).get("global_batch_size") if info is not None else None
            if isinstance(gbs, int) and not isinstance(gbs, bool) and gbs > 0:
                self._records_per_batch = gbs
            else:
                logger.warning(
                    "searcher.max_length is in records but hyperparameters.global_batch_size is not "
                    "set: training runs for model.fit's epochs"
                )
                self._unit = None
        self._ops: Iterator[SearcherOperation] | None = None
        self._op: SearcherOperation | None = None
        self._length_reached = False
        self._progress_at = -float("inf")

    # --- Keras hooks -------------------------------------------------------------------------------

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._length_reached = False
        if self._checkpoint is not None:
            self._load(self._checkpoint)
        if self._unit is not None and self._ops is None:
            self._ops = self._core.searcher.operations()
            self._op = next(self._ops, None)
            if self._op is None:
                logger.info("the searcher has no further work for this trial: not training")
                self.model.stop_training = True

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._is_chief:
            self._core.train.set_status("training")

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._steps_completed += 1
        if (
            self._is_chief
            and isinstance(self._report_period, int)
            and self._steps_completed % self._report_period == 0
        ):
            self._core.train.report_training_metrics(self._steps_completed, _numbers(logs))
        if self._unit == "batches":
            self._progress(self._steps_completed)
        elif self._unit == "records":
            self._progress(self._steps_completed * self._records_per_batch)

    def on_test_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._is_chief:
            self._core.train.set_status("validating")

    def on_test_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._validation = _numbers(logs)
        metric = self._searcher_metric
        # Keras names validation metrics val_* in fit's logs but not here: the searcher's name is
        # reported too, so a searcher.metric written either way finds its value.
        if metric and metric not in self._validation:
            bare = metric.removeprefix(VALIDATION_PREFIX)
            if bare in self._validation:
                self._validation[metric] = self._validation[bare]
        if self._is_chief and self._validation:
            self._core.train.report_validation_metrics(self._steps_completed, self._validation)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        epoch_logs = _numbers(logs)
        if self._is_chief and self._report_period == "epoch":
            training = {k: v for k, v in epoch_logs.items() if not k.startswith(VALIDATION_PREFIX)}
            self._core.train.report_training_metrics(self._steps_completed, training)
        self._last_train_epoch = epoch
        if self._unit == "epochs":
            self._progress(epoch + 1)
        elif self._op is None and self._is_chief and self.params.get("epochs"):
            self._core.train.report_progress((epoch + 1) / self.params["epochs"])
        if self._length_reached:
            self._complete_operation(epoch_logs)
        if self._checkpoint_epochs > 0 and (epoch + 1) % self._checkpoint_epochs == 0:
            self._save(epoch)
        # Checked after the checkpoint, which can take a while; an unsaved stop is saved in on_train_end.
        if self._core.preempt.should_preempt():
            logger.info("preemption signal: stopping after epoch %s", epoch)
            self.model.stop_training = True

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._last_train_epoch > self._last_ckpt_epoch:
            self._save(self._last_train_epoch)
        # fit() reads the resumed epoch once; a later fit() on this model starts where it is told.
        self.model._initial_epoch = None
        if self._is_chief:
            self._core.train.set_status("finishing")

    # --- searcher ----------------------------------------------------------------------------------

    def _progress(self, done: float) -> None:
        op = self._op
        if op is None or self._length_reached:
            return
        now = time.monotonic()
        if done >= op.length or now - self._progress_at >= PROGRESS_INTERVAL:
            op.report_progress(min(done, op.length))
            self._progress_at = now
        if done >= op.length:
            logger.info("searcher length %s %s reached", op.length, self._unit)
            self._length_reached = True
            # Keras still validates this epoch before on_epoch_end, where the operation completes.
            self.model.stop_training = True

    def _complete_operation(self, epoch_logs: Mapping[str, Any]) -> None:
        assert self._op is not None and self._ops is not None
        self._op.report_completed(self._searcher_value(epoch_logs))
        self._length_reached = False
        self._op = next(self._ops, None)
        # A longer operation follows (a promotion): keep training towards it.
        self.model.stop_training = self._op is None

    def _searcher_value(self, epoch_logs: Mapping[str, Any]) -> Any:
        metric = self._searcher_metric
        if metric is None:
            return None
        bare = metric.removeprefix(VALIDATION_PREFIX)
        for source, name in ((self._validation, metric), (self._validation, bare), (epoch_logs, metric)):
            if name in source:
                return source[name]
        known = sorted({*self._validation, *epoch_logs}) or ["none"]
        raise DetError(
            f"searcher.metric {metric!r} is not among the metrics model.fit reported "
            f"({', '.join(known)}): pass validation_data to fit() and compile the model with that metric"
        )

    # --- checkpoints -------------------------------------------------------------------------------

    def _save(self, epoch: int) -> None:
        if self._is_chief:
            self._core.train.set_status("checkpointing")
        metadata = {"steps_completed": self._steps_completed}
        state = {"epoch": epoch, "steps_completed": self._steps_completed, "continue_id": self._continue_id}
        # Every worker of a multi-worker strategy must save (the save is collective); only the
        # chief's files are kept.
        shard = self._core.distributed.size > 1
        with self._core.checkpoint.store_path(metadata, shard=shard) as (path, storage_id):
            if self._is_chief:
                self.save_model(self.model, str(path / CHECKPOINT_WEIGHTS), self._core.distributed)
                (path / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
            else:
                with tempfile.TemporaryDirectory(prefix="det-keras-worker-") as scratch:
                    self.save_model(
                        self.model, str(Path(scratch) / CHECKPOINT_WEIGHTS), self._core.distributed
                    )
        self._last_ckpt_epoch = epoch
        if self._is_chief:
            logger.info(
                "stored checkpoint %s (epoch %s, %s batches)", storage_id, epoch, self._steps_completed
            )

    def _load(self, checkpoint: str) -> None:
        if self._is_chief:
            self._core.train.set_status("restoring")
        with contextlib.ExitStack() as stack:
            path = stack.enter_context(self._core.checkpoint.restore_path(checkpoint))
            weights = path / CHECKPOINT_WEIGHTS
            if not weights.is_file():
                raise DetError(
                    f"checkpoint {checkpoint} has no {CHECKPOINT_WEIGHTS}: it was not written by "
                    "det.keras.DeterminedCallback"
                )
            optimizer = getattr(self.model, "optimizer", None)
            if optimizer is not None and not optimizer.built:
                # The weights file holds the optimizer's variables too; they must exist to be filled.
                optimizer.build(self.model.trainable_variables)
            self.load_model(self.model, str(weights), self._core.distributed)
            state_file = path / STATE_FILE
            state = json.loads(state_file.read_text(encoding="utf-8")) if state_file.is_file() else {}
        if state.get("continue_id") != self._continue_id:
            logger.info("loaded the weights of checkpoint %s; training starts at epoch 0", checkpoint)
            return
        self._steps_completed = int(state["steps_completed"])
        epoch = int(state["epoch"])
        self._last_train_epoch = self._last_ckpt_epoch = epoch
        # How Keras's own BackupAndRestore moves fit() on: read once, after on_train_begin.
        self.model._initial_epoch = epoch + 1
        logger.info(
            "resuming from checkpoint %s at epoch %s (%s batches trained)",
            checkpoint,
            epoch + 1,
            self._steps_completed,
        )

    def save_model(self, model: keras.Model, path: str, distributed: DistributedContext) -> None:
        """Write ``model`` to ``path`` (a ``*.weights.h5`` file); override to save differently."""
        model.save_weights(path)

    def load_model(self, model: keras.Model, path: str, distributed: DistributedContext) -> None:
        """Read ``model`` back from ``path``; override together with :meth:`save_model`."""
        model.load_weights(path)


class TensorBoard(keras.callbacks.TensorBoard):  # type: ignore[misc]
    """Keras's TensorBoard callback writing into the trial's TensorBoard folder
    (``core_context.train.get_tensorboard_path()``); a ``log_dir`` given is ignored with a warning."""

    def __init__(self, core_context: Context, *args: Any, **kwargs: Any) -> None:
        given = kwargs.pop("log_dir", None)
        if given is None and args:
            given, args = args[0], args[1:]
        if given is not None:
            logger.warning(
                "det.keras.TensorBoard: log_dir=%s is ignored; the trial's TensorBoard folder is used", given
            )
        super().__init__(str(core_context.train.get_tensorboard_path()), *args, **kwargs)


def _numbers(logs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keras logs as plain Python numbers (they may be NumPy or tensor scalars)."""
    out: dict[str, Any] = {}
    for name, value in (logs or {}).items():
        if name in ("batch", "size"):
            continue
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            out[name] = value
    return out


def _length_unit(length: Any) -> str | None:
    """The unit of ``searcher.max_length`` as written (``{epochs: 5}``, a bare batch count) or
    normalized (``{unit, value}``); None when there is none (e.g. ``max_time``)."""
    if isinstance(length, int) and not isinstance(length, bool):
        return "batches"
    if not isinstance(length, Mapping):
        return None
    if "unit" in length:
        unit = str(length["unit"]).lower()
        return unit if unit in _UNITS else None
    return next((unit for unit in _UNITS if unit in length), None)
