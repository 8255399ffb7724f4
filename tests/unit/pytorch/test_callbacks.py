"""Determined's PyTorch extras: callbacks, metric reducers, fit()'s parameter order, init()'s arguments."""

from __future__ import annotations

import logging
import typing
from typing import Any

import pytest
import torch

from det_airflow import pytorch
from det_airflow.errors import DetError
from det_airflow.pytorch import Batch, Epoch, Trainer

from ._trials import N_TRAIN, N_VALIDATION, TinyTrial
from .conftest import Store

HPARAMS = {"lr": 0.1, "global_batch_size": 8}
EPOCH_LEN = -(-N_TRAIN // 8)
CONFIG = {"searcher": {"name": "single", "metric": "validation_loss"}, "checkpoint_policy": "all"}


class Recorder(pytorch.PyTorchCallback):
    """Writes down every hook call; its state is how many epochs it saw end."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.epochs_ended = 0
        self.loaded: dict[str, Any] | None = None

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        self.calls.append(("on_trial_startup", (first_batch_idx, checkpoint_uuid)))

    def on_trial_shutdown(self) -> None:
        self.calls.append(("on_trial_shutdown", None))

    def on_training_start(self) -> None:
        self.calls.append(("on_training_start", None))

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.calls.append(("on_training_epoch_start", epoch_idx))

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.epochs_ended += 1
        self.calls.append(("on_training_epoch_end", epoch_idx))

    def on_training_workload_end(self, avg_metrics: dict[str, Any], batch_metrics: Any) -> None:
        self.calls.append(("on_training_workload_end", avg_metrics["batches"]))

    def on_validation_start(self) -> None:
        self.calls.append(("on_validation_start", None))

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.calls.append(("on_validation_end", metrics["batches"]))

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["recorder_note"] = "saved by a hook"
        self.calls.append(("on_checkpoint_save_start", None))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.calls.append(("on_checkpoint_write_end", checkpoint_dir))

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self.calls.append(("on_checkpoint_end", checkpoint_dir))

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.calls.append(("on_checkpoint_upload_end", uuid))

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        self.calls.append(("on_checkpoint_load_start", checkpoint.get("recorder_note")))

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_ended": self.epochs_ended}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded = state_dict
        self.epochs_ended = state_dict["epochs_ended"]


class CallbackTrial(TinyTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.recorder = Recorder()

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"recorder": self.recorder}


class Accuracy(pytorch.MetricReducer):
    def reset(self) -> None:
        self.correct, self.total = 0, 0

    def update(self, correct: int, total: int) -> None:
        self.correct += correct
        self.total += total

    def per_slot_reduce(self) -> tuple[int, int]:
        return self.correct, self.total

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> dict[str, float]:
        correct = sum(c for c, _ in per_slot_metrics)
        total = sum(t for _, t in per_slot_metrics)
        return {"exact_accuracy": correct / total, "validation_examples": total}


class ReducerTrial(TinyTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.accuracy = context.wrap_reducer(Accuracy(), for_training=False)
        self.largest_loss = context.wrap_reducer(max, name="largest_loss", for_validation=False)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        metrics = super().train_batch(batch, epoch_idx, batch_idx)
        self.largest_loss.update(metrics["loss"].item())
        return metrics

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        self.accuracy.update(int((logits.argmax(dim=1) == y).sum()), len(y))
        return {"validation_loss": torch.nn.functional.cross_entropy(logits, y)}


def _trainer(trial_class: type, **init: Any) -> Any:
    """A context manager yielding (trial, trainer)."""
    import contextlib

    @contextlib.contextmanager
    def make():
        with pytorch.init(hparams=HPARAMS, exp_conf=CONFIG, **init) as context:
            trial = trial_class(context)
            yield trial, Trainer(trial, context)

    return make()


def test_every_hook_is_called_in_determined_order(store: Store) -> None:
    with _trainer(CallbackTrial) as (trial, trainer):
        trainer.fit(max_length=Epoch(2), validation_period=Epoch(1), reporting_period=Epoch(1))
    names = [name for name, _ in trial.recorder.calls]
    assert trial.recorder.calls[0] == ("on_trial_startup", (0, None))
    assert names[1] == "on_training_start" and names[-1] == "on_trial_shutdown"
    assert [arg for name, arg in trial.recorder.calls if name == "on_training_epoch_start"] == [0, 1]
    assert [arg for name, arg in trial.recorder.calls if name == "on_training_epoch_end"] == [0, 1]
    assert [arg for name, arg in trial.recorder.calls if name == "on_validation_end"] == [
        EPOCH_LEN,
        2 * EPOCH_LEN,
    ]
    first_epoch = names[names.index("on_training_epoch_end") :]
    assert first_epoch[:8] == [
        "on_training_epoch_end",
        "on_training_workload_end",
        "on_validation_start",
        "on_validation_end",
        "on_checkpoint_save_start",
        "on_checkpoint_write_end",
        "on_checkpoint_end",
        "on_checkpoint_upload_end",
    ]
    uploaded = [arg for name, arg in trial.recorder.calls if name == "on_checkpoint_upload_end"]
    assert uploaded == [c["uuid"] for c in store.checkpoints()]


def test_a_callbacks_state_travels_in_checkpoints(store: Store) -> None:
    with _trainer(CallbackTrial) as (_, trainer):
        trainer.fit(max_length=Epoch(1))
    latest = store.checkpoints()[-1]["uuid"]
    with _trainer(CallbackTrial) as (resumed, trainer):
        trainer.fit(max_length=Epoch(2), latest_checkpoint=latest)
    assert resumed.recorder.loaded == {"epochs_ended": 1}
    assert resumed.recorder.calls[0] == ("on_checkpoint_load_start", "saved by a hook")
    assert resumed.recorder.calls[1] == ("on_trial_startup", (EPOCH_LEN, latest))
    assert resumed.recorder.epochs_ended == 2


def test_build_callbacks_must_answer_callbacks() -> None:
    class Wrong(TinyTrial):
        def build_callbacks(self) -> dict[str, Any]:
            return {"printer": print}

    with pytest.raises(
        DetError, match=r"build_callbacks\(\)\['printer'\]: expected a det.pytorch.PyTorchCallback"
    ):
        with _trainer(Wrong):
            pass


def test_fit_takes_determineds_positional_order(store: Store) -> None:
    # Determined: fit(checkpoint_period, validation_period, max_length, ...)
    with _trainer(TinyTrial) as (trial, trainer):
        trainer.fit(Batch(2), Batch(3), Batch(6))
    assert len(trial.seen) == 6
    assert store.steps("validation") == [3, 6]
    assert [c["steps_completed"] for c in store.checkpoints()] == [2, 3, 4, 6]


def test_profiling_is_accepted_and_said_to_be_not_collected(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="det_airflow.pytorch"):
        with _trainer(TinyTrial) as (_, trainer):
            trainer.fit(max_length=Batch(2), profiling_enabled=True)
    assert "profiling is not collected" in caplog.text
    assert store.steps("validation") == [2]


def test_reducers_add_their_metrics_to_validation_and_training(store: Store) -> None:
    with _trainer(ReducerTrial) as (_, trainer):
        trainer.fit(max_length=Batch(4), reporting_period=Batch(2))
    validation = store.metrics("validation")[-1]["metrics"]
    assert validation["validation_examples"] == N_VALIDATION
    assert 0.0 <= validation["exact_accuracy"] <= 1.0
    training = store.metrics("training")
    assert [("largest_loss" in r["metrics"]) for r in training] == [True, True]
    assert all("exact_accuracy" not in r["metrics"] for r in training)


def test_a_function_reducer_needs_a_name() -> None:
    with pytorch.init(hparams=HPARAMS, exp_conf=CONFIG) as context:
        with pytest.raises(DetError, match="a function reducer needs a name="):
            context.wrap_reducer(max)


def test_init_accepts_determineds_arguments(store: Store) -> None:
    with pytorch.init(
        hparams=HPARAMS, exp_conf=CONFIG, aggregation_frequency=1, enable_tensorboard_logging=False
    ) as context:
        assert context.get_hparam("lr") == 0.1


def test_torch_data_describes_batches() -> None:
    def train_batch(batch: pytorch.TorchData) -> None: ...

    assert train_batch.__annotations__["batch"] == "pytorch.TorchData"
    assert torch.Tensor in typing.get_args(pytorch.TorchData)
