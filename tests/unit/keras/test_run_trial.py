"""A TFKerasTrial trained the way a user runs it: ``det experiment create --local --test-mode`` and
``python3 -m det_airflow.keras.run_trial``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import det_airflow

pytest.importorskip("tensorflow")

REPO = Path(det_airflow.__file__).resolve().parent.parent
DET = Path(sys.executable).parent / "det"

MODEL_DEF = """
import numpy as np
import keras
import tensorflow as tf

from determined import keras as det_keras


def arrays():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    return x, (x.sum(axis=1, keepdims=True) > 0).astype("float32")


class MyTrial(det_keras.TFKerasTrial):
    def __init__(self, context):
        self.context = context

    def build_model(self):
        model = self.context.wrap_model(keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")]))
        optimizer = self.context.wrap_optimizer(keras.optimizers.SGD(self.context.get_hparam("lr")))
        model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
        return model

    def build_training_data_loader(self):
        x, y = arrays()
        return self.context.wrap_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(self.context.get_per_slot_batch_size()))

    def build_validation_data_loader(self):
        return arrays()
"""

CONFIG = """
name: keras-trial
entrypoint: python3 -m det_airflow.keras.run_trial model_def:MyTrial
hyperparameters:
  global_batch_size: 16
  lr: 0.1
searcher:
  name: single
  metric: val_accuracy
  smaller_is_better: false
  max_length:
    epochs: 3
"""


def _folder(tmp_path: Path, model_def: str = MODEL_DEF) -> Path:
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "model_def.py").write_text(textwrap.dedent(model_def))
    (folder / "const.yaml").write_text(CONFIG)
    return folder


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "TF_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "det_airflow" / "compat"), str(REPO)])
    env["DET_LOCAL_STORE"] = str(tmp_path / "store")
    return env


def test_local_test_mode_trains_a_keras_trial(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    done = subprocess.run(
        [str(DET), "experiment", "create", "--local", "--test-mode", "const.yaml", "."],
        cwd=folder,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Local test mode succeeded" in done.stdout


def test_a_legacy_entrypoint_runs_a_keras_trial(tmp_path: Path) -> None:
    """``entrypoint: model_def:MyTrial`` as Determined's configs name a trial class: the legacy
    runner finds it is a TFKerasTrial and trains it with Keras."""
    folder = _folder(tmp_path)
    (folder / "const.yaml").write_text(
        CONFIG.replace("python3 -m det_airflow.keras.run_trial model_def:MyTrial", "model_def:MyTrial")
    )
    done = subprocess.run(
        [str(DET), "experiment", "create", "--local", "--test-mode", "const.yaml", "."],
        cwd=folder,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Local test mode succeeded" in done.stdout
    assert "val_accuracy" in done.stdout + done.stderr


def _run_trial(tmp_path: Path, folder: Path, spec: str) -> subprocess.CompletedProcess[str]:
    """The runner as a trial starts it (its hyperparameters in the environment)."""
    env = {**_env(tmp_path), "DET_TRIAL_ID": "1", "DET_HPARAMS": '{"global_batch_size": 16, "lr": 0.1}'}
    return subprocess.run(
        [sys.executable, "-m", "det_airflow.keras.run_trial", spec],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_runner_names_a_missing_class(tmp_path: Path) -> None:
    done = _run_trial(tmp_path, _folder(tmp_path), "model_def:Missing")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "error: module 'model_def' has no class 'Missing'"


def test_the_runner_refuses_a_class_that_is_not_a_keras_trial(tmp_path: Path) -> None:
    folder = _folder(tmp_path, MODEL_DEF + "\nclass NotATrial:\n    pass\n")
    done = _run_trial(tmp_path, folder, "model_def:NotATrial")
    assert done.returncode == 1
    assert "error: model_def:NotATrial is not a det.keras.TFKerasTrial subclass" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_model_not_wrapped_is_one_clear_line(tmp_path: Path) -> None:
    unwrapped = MODEL_DEF.replace("self.context.wrap_model(keras.Sequential", "(keras.Sequential")
    done = _run_trial(tmp_path, _folder(tmp_path, unwrapped), "model_def:MyTrial")
    assert done.returncode == 1
    assert "error: MyTrial.build_model: pass the model through context.wrap_model()" in done.stderr
    assert "Traceback" not in done.stderr


def test_run_trains_for_the_searcher_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off-cluster, run() takes the config's length: 3 epochs of 4 batches."""
    import yaml

    from det_airflow.keras.run_trial import load_trial_class, run

    folder = _folder(tmp_path)
    for name in [n for n in os.environ if n.startswith("DET_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DET_LOCAL_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(REPO / "det_airflow" / "compat"))
    config = yaml.safe_load(CONFIG)
    try:
        assert run(load_trial_class("model_def:MyTrial"), exp_conf=config) == 0
    finally:
        # The trial imported `determined` from the alias folder: later tests look for it afresh.
        for name in [n for n in sys.modules if n == "model_def" or n.split(".")[0] == "determined"]:
            del sys.modules[name]
    lines = (tmp_path / "store" / "metrics.jsonl").read_text().splitlines()
    assert sum('"group":"validation"' in line for line in lines) == 3
