"""Determined code of each framework API runs unchanged on a real Airflow, as its users wrote it: a
DeepSpeedTrial, a TFKerasTrial (legacy `model_def:Class` entrypoint), and Hugging Face's Trainer with
DetCallback. Each trains, validates, checkpoints and ends COMPLETED, its metrics at the master."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.det_env import DetEnv, kept_checkpoints

pytestmark = pytest.mark.integration

HF_TRAIN = """\
import torch
import transformers
from torch.utils.data import Dataset

import determined as det
from determined.transformers import DetCallback

SEQUENCE, VOCAB = 8, 32


class Tokens(Dataset):
    def __init__(self, count, seed):
        self.ids = torch.randint(0, VOCAB, (count, SEQUENCE), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(
    transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQUENCE, n_embd=16, n_layer=2, n_head=2)
)
args = transformers.TrainingArguments(
    output_dir="out",
    max_steps=8,
    per_device_train_batch_size=4,
    logging_steps=2,
    eval_strategy="steps",
    eval_steps=4,
    save_strategy="steps",
    save_steps=4,
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
)
with det.core.init() as core_context:
    callback = DetCallback(core_context, args)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Tokens(32, 1), eval_dataset=Tokens(8, 2), callbacks=[callback]
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
"""


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def _context(root: Path, files: dict[str, str], config: dict[str, Any]) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "const.yaml").write_text(yaml.safe_dump(config))
    return root


def _completed(det: DetEnv, context: Path) -> tuple[int, dict[int, dict[str, Any]]]:
    """Runs the context's const.yaml to its end; the trial's id and its validations by step."""
    experiment_id = det.create(context / "const.yaml", context)
    answer = det.wait_experiment(experiment_id, timeout=900)
    trial_id = answer["trials"][0]["id"] if answer["trials"] else None
    logs = det.det("trial", "logs", str(trial_id)).stdout if trial_id else ""
    assert answer["experiment"]["state"] == "COMPLETED", logs[-4000:]
    assert trial_id is not None
    validation = det.get(f"/trials/{trial_id}/metrics?group=validation")["metrics"]
    kept_checkpoints(det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"])
    return trial_id, {m["steps_completed"]: m["metrics"] for m in validation}


def test_a_deepspeed_trial_runs_on_airflow(det: DetEnv, tmp_path: Path) -> None:
    deepspeed = pytest.importorskip("tests.unit.pytorch.test_deepspeed")
    context = _context(
        tmp_path / "deepspeed",
        {"model_def.py": deepspeed.MODEL_DEF},
        deepspeed._config(slots=1, max_length=4),
    )

    _, validations = _completed(det, context)

    assert sorted(validations) == [2, 4]
    assert all(isinstance(v["validation_loss"], float) for v in validations.values())


def test_a_keras_trial_runs_on_airflow(det: DetEnv, tmp_path: Path) -> None:
    keras = pytest.importorskip("tests.unit.keras.test_run_trial")
    config = yaml.safe_load(keras.CONFIG)
    config["entrypoint"] = "model_def:MyTrial"  # Determined's legacy entrypoint
    context = _context(tmp_path / "keras", {"model_def.py": textwrap.dedent(keras.MODEL_DEF)}, config)

    _, validations = _completed(det, context)

    assert len(validations) == 3  # one per epoch of max_length
    assert all(0.0 <= v["val_accuracy"] <= 1.0 for v in validations.values())


def test_a_hugging_face_trainer_with_detcallback_runs_on_airflow(det: DetEnv, tmp_path: Path) -> None:
    config = {
        "name": "hf-detcallback",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "eval_loss", "max_length": {"batches": 8}},
        "max_restarts": 0,
    }
    context = _context(tmp_path / "hf", {"train.py": HF_TRAIN}, config)

    trial_id, validations = _completed(det, context)

    assert sorted(validations) == [4, 8]
    assert all(v["eval_loss"] > 0 for v in validations.values())
    training = det.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]
    assert sorted({m["steps_completed"] for m in training}) == [2, 4, 6, 8]
