"""DeterminedCallback with a real model.fit(): reports, checkpoints, resumes, obeys the searcher."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import det_airflow as det
from det_airflow.errors import DetError

from .conftest import records

keras = pytest.importorskip("keras")

from det_airflow.keras import CHECKPOINT_WEIGHTS, DeterminedCallback  # noqa: E402

BATCHES_PER_EPOCH = 4  # 32 records in batches of 8


def _config(max_length: dict[str, int]) -> dict[str, Any]:
    return {"searcher": {"name": "single", "metric": "val_loss", "max_length": max_length}}


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype("float32")
    return x, (x @ np.array([1.0, -2.0, 0.5], dtype="float32"))[:, None]


def _model() -> keras.Model:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def _fit(model: keras.Model, epochs: int, *callbacks: keras.callbacks.Callback) -> keras.callbacks.History:
    x, y = _data()
    return model.fit(
        x, y, batch_size=8, epochs=epochs, validation_data=(x, y), verbose=0, callbacks=list(callbacks)
    )


class _WeightsAtStart(keras.callbacks.Callback):  # type: ignore[misc]
    """The model's weights once every earlier callback's on_train_begin ran (after a restore)."""

    def on_train_begin(self, logs: Any = None) -> None:
        self.weights = [w.copy() for w in self.model.get_weights()]


def _callback(core_context: Any, continue_id: int | str = 1, **kwargs: Any) -> DeterminedCallback:
    info = det.get_cluster_info()
    return DeterminedCallback(
        core_context, checkpoint=info.latest_checkpoint if info else None, continue_id=continue_id, **kwargs
    )


def test_reports_checkpoints_and_stops_at_the_searcher_length(trial_env: Callable[..., Path]) -> None:
    store = trial_env(_config({"epochs": 3}))
    with det.core.init() as core_context:
        history = _fit(_model(), 10, _callback(core_context))

    assert history.epoch == [0, 1, 2]
    metrics = records(store, "metrics.jsonl")
    training = [m for m in metrics if m["group"] == "training"]
    validation = [m for m in metrics if m["group"] == "validation"]
    assert [m["steps_completed"] for m in training] == [4, 8, 12]
    assert [m["steps_completed"] for m in validation] == [4, 8, 12]
    assert set(training[0]["metrics"]) == {"loss"}
    # Keras's evaluation name, and the searcher's name for it.
    assert set(validation[0]["metrics"]) == {"loss", "val_loss"}
    assert validation[0]["metrics"]["loss"] == validation[0]["metrics"]["val_loss"]
    checkpoints = records(store, "checkpoints.jsonl")
    assert [c["steps_completed"] for c in checkpoints] == [4, 8, 12]
    assert (store / "checkpoints" / checkpoints[-1]["uuid"] / CHECKPOINT_WEIGHTS).is_file()
    completed = [e for e in records(store, "events.jsonl") if e["event"] == "searcher_completed"]
    assert [(e["length"], e["metric"]) for e in completed] == [(3, validation[-1]["metrics"]["loss"])]


def test_a_batch_length_stops_mid_epoch_after_validating(trial_env: Callable[..., Path]) -> None:
    store = trial_env(_config({"batches": 6}))
    with det.core.init() as core_context:
        history = _fit(_model(), 10, _callback(core_context, train_metrics_report_period=2))

    assert history.epoch == [0, 1]
    metrics = records(store, "metrics.jsonl")
    assert [m["steps_completed"] for m in metrics if m["group"] == "validation"] == [4, 6]
    # Every 2 batches, plus nothing per epoch.
    assert [m["steps_completed"] for m in metrics if m["group"] == "training"] == [2, 4, 6]
    assert [c["steps_completed"] for c in records(store, "checkpoints.jsonl")] == [4, 6]
    assert [e["length"] for e in records(store, "events.jsonl") if e["event"] == "searcher_completed"] == [6]


def test_resumes_from_its_checkpoint_at_the_next_epoch(trial_env: Callable[..., Path]) -> None:
    store = trial_env(_config({"epochs": 5}))
    first = _model()
    with det.core.init() as core_context:
        _fit(first, 2, _callback(core_context))  # a pause after two epochs
    saved = first.get_weights()
    latest = records(store, "checkpoints.jsonl")[-1]["uuid"]

    trial_env(_config({"epochs": 5}), latest_checkpoint=latest)
    start = _WeightsAtStart()
    with det.core.init() as core_context:
        history = _fit(_model(), 10, _callback(core_context), start)

    assert history.epoch == [2, 3, 4]
    for restored, expected in zip(start.weights, saved, strict=True):
        np.testing.assert_allclose(restored, expected)
    training = [m["steps_completed"] for m in records(store, "metrics.jsonl") if m["group"] == "training"]
    assert training == [4, 8, 12, 16, 20]


def test_another_continue_id_loads_the_weights_and_starts_at_epoch_zero(
    trial_env: Callable[..., Path],
) -> None:
    store = trial_env(_config({"epochs": 1}))
    first = _model()
    with det.core.init() as core_context:
        _fit(first, 1, _callback(core_context))
    latest = records(store, "checkpoints.jsonl")[-1]["uuid"]

    trial_env(_config({"epochs": 1}), latest_checkpoint=latest)
    start = _WeightsAtStart()
    with det.core.init() as core_context:
        history = _fit(_model(), 1, _callback(core_context, continue_id="another trial"), start)

    assert history.epoch == [0]
    np.testing.assert_allclose(start.weights[0], first.get_weights()[0])


def test_preemption_stops_at_the_epoch_boundary_with_a_checkpoint(trial_env: Callable[..., Path]) -> None:
    """Test mode asks to stop at the first check after a report, as a pause would."""
    store = trial_env(_config({"epochs": 5}), test_mode=True)
    with det.core.init() as core_context:
        history = _fit(_model(), 5, _callback(core_context, checkpoint_epochs=0))

    assert history.epoch == [0]
    assert [c["steps_completed"] for c in records(store, "checkpoints.jsonl")] == [4]


def test_off_cluster_fit_decides_the_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DET_TRIAL_ID", "DET_EXPERIMENT_CONFIG", "DET_TEST_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DET_LOCAL_STORE", str(tmp_path / "store"))
    with det.core.init() as core_context:
        history = _fit(_model(), 2, DeterminedCallback(core_context, checkpoint=None, continue_id=0))
    assert history.epoch == [0, 1]


def test_a_missing_searcher_metric_names_the_reported_ones(trial_env: Callable[..., Path]) -> None:
    config = _config({"epochs": 1})
    config["searcher"]["metric"] = "val_accuracy"
    trial_env(config)
    with (
        det.core.init() as core_context,
        pytest.raises(DetError, match=r"'val_accuracy' is not among .*loss"),
    ):
        _fit(_model(), 1, _callback(core_context))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"train_metrics_report_period": "batch"}, 'train_metrics_report_period must be "epoch" or a number'),
        ({"train_metrics_report_period": 0}, "train_metrics_report_period"),
        ({"checkpoint_epochs": -1}, "checkpoint_epochs must be an integer >= 0, got -1"),
    ],
)
def test_bad_arguments_are_refused(
    trial_env: Callable[..., Path], kwargs: dict[str, Any], message: str
) -> None:
    trial_env(_config({"epochs": 1}))
    with det.core.init() as core_context, pytest.raises(DetError, match=message):
        DeterminedCallback(core_context, checkpoint=None, continue_id=1, **kwargs)


def test_a_checkpoint_of_something_else_is_refused(trial_env: Callable[..., Path]) -> None:
    trial_env(_config({"epochs": 1}))
    with det.core.init() as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "model.pt").write_bytes(b"not keras")
        callback = DeterminedCallback(core_context, checkpoint=uuid, continue_id=1)
        with pytest.raises(DetError, match=f"checkpoint {uuid} has no {CHECKPOINT_WEIGHTS}"):
            _fit(_model(), 1, callback)


def test_tensorboard_writes_into_the_trial_folder(trial_env: Callable[..., Path]) -> None:
    trial_env(_config({"epochs": 1}))
    with det.core.init() as core_context:
        board = det.keras.TensorBoard(core_context, log_dir="ignored")
        folder = core_context.train.get_tensorboard_path()
        _fit(_model(), 1, board)
    assert not Path("ignored").exists()
    assert list(folder.rglob("events.out.tfevents.*"))
