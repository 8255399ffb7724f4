"""``TFKerasTrial`` and its context: Determined's legacy Keras trial interface.

A trial builds a compiled model and its training and validation data; ``det_airflow.keras.run_trial``
fits the model with a :class:`~det_airflow.keras.DeterminedCallback`, so a legacy trial reports,
checkpoints and resumes exactly as a ``model.fit()`` script with the callback does.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import Any, Union

import keras
import numpy as np
import tensorflow as tf

from det_airflow.core import Context
from det_airflow.errors import DetError

logger = logging.getLogger("det_airflow.keras")

InputData = Union[  # noqa: UP007 - a runtime alias users may also name in annotations
    tf.data.Dataset,
    keras.utils.PyDataset,
    tuple[Any, ...],
]
"""What a data loader method returns: a ``tf.data.Dataset`` (wrapped with ``context.wrap_dataset``),
a ``keras.utils.Sequence`` / ``PyDataset``, or NumPy arrays as ``(x, y)`` or ``(x, y, sample_weight)``."""

FIT_ARGUMENTS = ("verbose", "class_weight", "shuffle", "validation_steps", "validation_freq")
"""The ``configure_fit`` arguments ``model.fit()`` takes in Keras 3."""
DATASET_ARGUMENTS = ("workers", "use_multiprocessing", "max_queue_size")
"""``configure_fit`` arguments Keras 3 moved onto ``keras.utils.PyDataset``: accepted, not applied."""


class TFKerasTrialContext:
    """What a :class:`TFKerasTrial` is given: the trial's hyperparameters and config, the Core API
    (``distributed``, and the rest through ``core``), and the wrappers its ``build_*`` methods call."""

    def __init__(
        self,
        core_context: Context,
        *,
        hparams: Mapping[str, Any],
        exp_conf: Mapping[str, Any],
        trial_seed: int,
    ) -> None:
        self.core = core_context
        self.distributed = core_context.distributed
        self._hparams = dict(hparams)
        self._config = dict(exp_conf)
        self._trial_seed = trial_seed
        info = core_context.info
        self._trial_id = info.trial.trial_id if info is not None else 0
        self._experiment_id = info.trial.experiment_id if info is not None else 0
        self.model: keras.Model | None = None
        self.optimizers: list[Any] = []
        self.fit_config: dict[str, Any] = {}

    def wrap_model(self, model: keras.Model) -> keras.Model:
        """Register the trial's model; call it in ``build_model`` before ``model.compile()``."""
        if not isinstance(model, keras.Model):
            raise DetError(f"context.wrap_model expects a keras.Model, got {type(model).__name__}")
        self.model = model
        return model

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """Register an optimizer (kept for Determined code; Keras 3 needs nothing more)."""
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_dataset(self, dataset: Any, shard_dataset: bool = True) -> Any:
        """A ``tf.data.Dataset`` sharded for this worker when training runs on several; anything
        else as given. With ``shard_dataset=False`` every worker reads the whole dataset."""
        if not isinstance(dataset, tf.data.Dataset) or self.distributed.size <= 1 or not shard_dataset:
            return dataset
        options = tf.data.Options()
        # Sharded here, by rank: the strategy must not shard it a second time.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.shard(self.distributed.size, self.distributed.rank).with_options(options)

    def configure_fit(
        self,
        verbose: Any = None,
        class_weight: Any = None,
        workers: Any = None,
        use_multiprocessing: Any = None,
        max_queue_size: Any = None,
        shuffle: Any = None,
        validation_steps: Any = None,
        validation_freq: Any = None,
    ) -> None:
        """Arguments for ``model.fit()``; those left out (None) keep Keras's defaults."""
        given = {k: v for k, v in locals().items() if k != "self" and v is not None}
        ignored = sorted(k for k in given if k in DATASET_ARGUMENTS)
        if ignored:
            logger.warning(
                "configure_fit(%s): Keras 3 takes these on keras.utils.PyDataset, not fit(); ignored",
                ", ".join(ignored),
            )
        self.fit_config.update({k: v for k, v in given.items() if k in FIT_ARGUMENTS})

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
        """Records per batch on this worker: the global batch size // the number of workers."""
        global_size = self.get_global_batch_size()
        if global_size < self.distributed.size:
            raise DetError(
                f"hyperparameters.global_batch_size ({global_size}) must be at least the number of "
                f"workers ({self.distributed.size})"
            )
        return global_size // self.distributed.size

    def get_experiment_config(self) -> dict[str, Any]:
        return dict(self._config)

    def get_data_config(self) -> dict[str, Any]:
        """The experiment config's free-form ``data`` section."""
        data = self._config.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    def get_trial_id(self) -> int:
        return self._trial_id

    def get_experiment_id(self) -> int:
        return self._experiment_id

    def get_trial_seed(self) -> int:
        return self._trial_seed

    def get_stop_requested(self) -> bool:
        return bool(self.model is not None and self.model.stop_training)

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Stop training at the end of this batch (Keras's ``model.stop_training``)."""
        if not isinstance(stop_requested, bool):
            raise TypeError(f"set_stop_requested expects a bool, got {stop_requested!r}")
        if self.model is None:
            raise DetError("set_stop_requested needs the model: call context.wrap_model in build_model first")
        self.model.stop_training = stop_requested


class TFKerasTrial(abc.ABC):
    """A Keras trial: subclass it, keep ``context`` in ``__init__``, and implement
    :meth:`build_model`, :meth:`build_training_data_loader` and :meth:`build_validation_data_loader`.
    ``entrypoint: model_def:MyTrial`` (or ``python3 -m det_airflow.keras.run_trial model_def:MyTrial``)
    trains it."""

    def __init__(self, context: TFKerasTrialContext) -> None:
        self.context = context

    @abc.abstractmethod
    def build_model(self) -> keras.Model:
        """The model, passed through ``context.wrap_model()`` and then compiled."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> InputData:
        """The training data (see :data:`InputData`)."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> InputData:
        """The validation data (see :data:`InputData`)."""

    def keras_callbacks(self) -> list[keras.callbacks.Callback]:
        """More Keras callbacks for ``model.fit()``."""
        return []

    def session_config(self) -> Any:
        """TensorFlow 1 session settings: accepted for Determined code, unused under TensorFlow 2."""
        return None


def fit_inputs(data: Any, what: str) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` for ``model.fit()`` from what a data loader method returned."""
    if isinstance(data, tf.data.Dataset | keras.utils.PyDataset):
        return data, None, None
    if isinstance(data, tuple) and len(data) in (2, 3):
        arrays = tuple(data) + (None,) * (3 - len(data))
        return arrays[0], arrays[1], arrays[2]
    if isinstance(data, np.ndarray):
        raise DetError(f"{what} returned one array: return (x, y) or (x, y, sample_weight)")
    raise DetError(
        f"{what} returned {type(data).__name__}: expected a tf.data.Dataset, a keras.utils.Sequence "
        "or a tuple (x, y) / (x, y, sample_weight) of arrays"
    )
