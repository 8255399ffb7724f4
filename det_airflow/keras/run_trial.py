"""``python3 -m det_airflow.keras.run_trial module:Class``: train a TFKerasTrial of the working folder.

What a legacy ``entrypoint: model_def:MyTrial`` runs for a Keras trial: the trial builds its compiled
model and data, and ``model.fit()`` trains it with a :class:`DeterminedCallback` for the length of
``searcher.max_length`` (epochs, or batches / records turned into epochs of the training data),
validating every epoch, resuming from the trial's latest checkpoint. Under the tensorflow launcher
with several workers (``TF_CONFIG``) the model is built in a ``MultiWorkerMirroredStrategy``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from det_airflow.errors import DetError
from det_airflow.legacy_trial import hparams_and_seed, import_trial_class

TF_CONFIG = "TF_CONFIG"
DEFAULT_VERBOSE = 2
"""One line per epoch: progress bars make unreadable trial logs."""


def load_trial_class(spec: str) -> type:
    """The TFKerasTrial subclass named by ``module:Class``, imported from the working folder."""
    from det_airflow.keras import TFKerasTrial

    trial_class = import_trial_class(spec)
    if not (isinstance(trial_class, type) and issubclass(trial_class, TFKerasTrial)):
        raise DetError(f"{spec} is not a det.keras.TFKerasTrial subclass")
    return trial_class


def run(
    trial_class: type,
    *,
    exp_conf: Mapping[str, Any] | None = None,
    hparams: Mapping[str, Any] | None = None,
) -> int:
    """Train ``trial_class`` (a TFKerasTrial subclass); answers the exit status, printing a user's
    error as one line. Off-cluster ``exp_conf`` and ``hparams`` stand in for the trial's."""
    try:
        _train(trial_class, exp_conf=exp_conf, hparams=hparams)
    except DetError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _train(
    trial_class: type, *, exp_conf: Mapping[str, Any] | None, hparams: Mapping[str, Any] | None
) -> None:
    import keras

    from det_airflow import core
    from det_airflow.cluster_info import get_cluster_info
    from det_airflow.core import DistributedContext
    from det_airflow.keras import DeterminedCallback, TFKerasTrial, TFKerasTrialContext
    from det_airflow.keras._trial import fit_inputs

    if not (isinstance(trial_class, type) and issubclass(trial_class, TFKerasTrial)):
        raise DetError(f"{trial_class!r} is not a det.keras.TFKerasTrial subclass")
    info = get_cluster_info()
    # Under TF_CONFIG, the strategy comes with the context, made after the Core API's collectives.
    distributed, strategy = DistributedContext.from_tf_config() if os.environ.get(TF_CONFIG) else (None, None)
    with core.init(distributed=distributed, config=exp_conf) as core_context:
        config = dict(info.trial.config) if info and info.trial.config else dict(exp_conf or {})
        trial_hparams, seed = hparams_and_seed(info, hparams, config)
        keras.utils.set_random_seed(seed)
        context = TFKerasTrialContext(core_context, hparams=trial_hparams, exp_conf=config, trial_seed=seed)
        trial = trial_class(context)
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            model: Any = trial.build_model()
        if not isinstance(model, keras.Model):
            raise DetError(
                f"{trial_class.__name__}.build_model returned {type(model).__name__}, not a keras.Model"
            )
        if not _same(context.model, model):
            raise DetError(f"{trial_class.__name__}.build_model: pass the model through context.wrap_model()")
        if not getattr(model, "compiled", False):
            raise DetError(
                f"{trial_class.__name__}.build_model: compile the model (model.compile(...)) before returning it"
            )
        x, y, sample_weight = fit_inputs(trial.build_training_data_loader(), "build_training_data_loader")
        validation = fit_inputs(trial.build_validation_data_loader(), "build_validation_data_loader")
        validation_data = (
            validation[0] if validation[1] is None else tuple(v for v in validation if v is not None)
        )
        batch_size = context.get_per_slot_batch_size() if y is not None else None
        epochs, steps_per_epoch = _fit_length(config, trial_hparams, x, batch_size)
        callback = DeterminedCallback(
            core_context,
            checkpoint=info.latest_checkpoint if info else None,
            continue_id=context.get_trial_id(),
        )
        fit_args = {"verbose": DEFAULT_VERBOSE, **context.fit_config}
        model.fit(
            x,
            y,
            sample_weight=sample_weight,
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            validation_data=validation_data,
            callbacks=[*trial.keras_callbacks(), callback],
            **fit_args,
        )


def _same(registered: object, built: object) -> bool:
    return registered is built


def _fit_length(
    config: Mapping[str, Any], hparams: Mapping[str, Any], x: Any, batch_size: int | None
) -> tuple[int, int | None]:
    """``(epochs, steps_per_epoch)`` that cover ``searcher.max_length``; the callback stops training
    at the exact length (a batch count need not end an epoch)."""
    from det_airflow.keras._callback import _length_unit

    searcher = config.get("searcher")
    length = searcher.get("max_length") if isinstance(searcher, Mapping) else None
    unit = _length_unit(length)
    if unit is None:
        logging.getLogger("det_airflow.keras").info("no searcher.max_length: training one epoch")
        return 1, None
    raw: Any = length.get("value", length.get(unit)) if isinstance(length, Mapping) else length
    value = int(raw)
    if value < 1:
        raise DetError(f"searcher.max_length: expected a length >= 1, got {value}")
    if unit == "epochs":
        return value, None
    batches = value
    if unit == "records":
        gbs = hparams.get("global_batch_size")
        if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
            raise DetError("searcher.max_length is in records: set hyperparameters.global_batch_size")
        batches = max(1, value // gbs)
    per_epoch = _batches_per_epoch(x, batch_size)
    if per_epoch is None:
        return 1, batches
    return math.ceil(batches / per_epoch), None


def _batches_per_epoch(x: Any, batch_size: int | None) -> int | None:
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        cardinality = int(x.cardinality())
        return cardinality if cardinality > 0 else None
    if batch_size is None:
        try:
            return len(x) or None
        except TypeError:
            return None
    records = (
        len(next(iter(x.values()))) if isinstance(x, Mapping) else len(x[0] if isinstance(x, list) else x)
    )
    return max(1, math.ceil(records / batch_size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m det_airflow.keras.run_trial", description=__doc__)
    parser.add_argument("trial", help="the TFKerasTrial to train, as module:Class")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    from det_airflow.keras import require_tensorflow

    try:
        require_tensorflow()
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        trial_class = load_trial_class(args.trial)
    except DetError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return run(trial_class)


if __name__ == "__main__":
    sys.exit(main())
