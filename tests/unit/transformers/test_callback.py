"""``DetCallback`` on a real ``transformers.Trainer``: a 2-layer GPT-2 built from a config (nothing
downloaded) trained on random tokens, as a local trial (``det e create --local``: the local store) and
as a trial of a master stand-in (preemption)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from torch.utils.data import Dataset  # noqa: E402

import det_airflow as det  # noqa: E402
from det_airflow import compat, trial_env  # noqa: E402
from det_airflow.core import _context  # noqa: E402
from det_airflow.core._local import CHECKPOINTS_FILE, EVENTS_FILE, METRICS_FILE, read_jsonl  # noqa: E402
from det_airflow.core._remote import RemoteBackend  # noqa: E402
from det_airflow.transformers import DetCallback  # noqa: E402
from det_airflow.transformers._callback import TrainerLengthError  # noqa: E402
from tests.unit.core.conftest import TRIAL_VARIABLES, FakeRuntime  # noqa: E402

SEQUENCE = 8
VOCAB = 32


class Tokens(Dataset):  # type: ignore[type-arg]
    """Random token sequences, each its own language-model label."""

    def __init__(self, count: int, seed: int) -> None:
        self.ids = torch.randint(0, VOCAB, (count, SEQUENCE), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2() -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQUENCE, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0
    )
    return transformers.GPT2LMHeadModel(config)


def training_args(out: Path, **overrides: Any) -> Any:
    settings: dict[str, Any] = {
        "output_dir": str(out),
        "max_steps": 8,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 8,
        "logging_steps": 2,
        "eval_strategy": "steps",
        "eval_steps": 4,
        "save_strategy": "steps",
        "save_steps": 4,
        "report_to": "none",
        "use_cpu": True,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **overrides,
    }
    return transformers.TrainingArguments(**settings)


def train(core_context: det.core.Context, args: Any, **callback: Any) -> Any:
    """What a Determined user's script does: the callback first (it may set resume_from_checkpoint)."""
    det_callback = DetCallback(core_context, args, **callback)
    trainer = transformers.Trainer(
        model=tiny_gpt2(),
        args=args,
        train_dataset=Tokens(32, seed=1),
        eval_dataset=Tokens(8, seed=2),
        callbacks=[det_callback],
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    return trainer


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in TRIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def local_trial(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Path]:
    """Trial 7 run as ``det e create --local`` runs it (no master): answers the local store."""

    def setup(max_length: Any, *, latest_checkpoint: str | None = None, test_mode: bool = False) -> Path:
        config = {"searcher": {"name": "single", "metric": "eval_loss", "max_length": max_length}}
        env = {
            trial_env.TRIAL_ID: "7",
            trial_env.EXPERIMENT_ID: "3",
            trial_env.EXPERIMENT_CONFIG: json.dumps(config),
            trial_env.LOCAL_STORE: str(tmp_path / "store"),
        }
        if latest_checkpoint:
            env[trial_env.LATEST_CHECKPOINT] = latest_checkpoint
        if test_mode:
            env[trial_env.TEST_MODE] = "1"
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return tmp_path / "store"

    return setup


def reports(store: Path, group: str) -> dict[int, dict[str, Any]]:
    return {
        r["steps_completed"]: r["metrics"] for r in read_jsonl(store / METRICS_FILE) if r["group"] == group
    }


def test_metrics_checkpoints_and_searcher_as_determined_reports_them(
    local_trial: Callable[..., Path], tmp_path: Path
) -> None:
    store = local_trial({"batches": 8})
    with det.core.init() as core_context:
        trainer = train(core_context, training_args(tmp_path / "out"), user_data={"tokenizer": "none"})

    assert trainer.state.global_step == 8
    training = reports(store, "training")
    assert sorted(training) == [2, 4, 6, 8]
    assert all({"loss", "learning_rate", "grad_norm"} <= set(m) for m in training.values())
    validation = reports(store, "validation")
    assert sorted(validation) == [4, 8]
    assert all("eval_loss" in m for m in validation.values())

    checkpoints = list(read_jsonl(store / CHECKPOINTS_FILE))
    assert [(c["steps_completed"], c["metadata"]) for c in checkpoints] == [
        (4, {"steps_completed": 4, "trial_id": 7}),
        (8, {"steps_completed": 8, "trial_id": 7}),
    ]
    last = store / "checkpoints" / checkpoints[-1]["uuid"] / "checkpoint-8"
    assert {"model.safetensors", "trainer_state.json", "optimizer.pt", "my_data.json"} <= {
        p.name for p in last.iterdir()
    }
    assert json.loads((last / "my_data.json").read_text()) == {"tokenizer": "none"}

    completed = [e for e in read_jsonl(store / EVENTS_FILE) if e["event"] == "searcher_completed"]
    assert completed == [{**completed[0], "length": 8, "metric": validation[8]["eval_loss"]}]


def test_a_second_run_resumes_from_the_latest_checkpoint(
    local_trial: Callable[..., Path], tmp_path: Path
) -> None:
    store = local_trial({"batches": 4})
    with det.core.init() as core_context:
        train(core_context, training_args(tmp_path / "first", max_steps=4))
    (latest,) = [c["uuid"] for c in read_jsonl(store / CHECKPOINTS_FILE)]
    (store / METRICS_FILE).unlink()

    local_trial({"batches": 8}, latest_checkpoint=latest)
    info = det.get_cluster_info()
    assert info is not None and info.latest_checkpoint == latest  # as Determined's examples read it
    args = training_args(tmp_path / "second")
    with det.core.init() as core_context:
        trainer = train(core_context, args)

    assert args.resume_from_checkpoint == str(tmp_path / "second" / "checkpoint-4")
    assert trainer.state.global_step == 8
    assert sorted(reports(store, "training")) == [6, 8]
    assert [c["steps_completed"] for c in read_jsonl(store / CHECKPOINTS_FILE)] == [4, 8]


def test_epochs_end_the_searcher_operation_at_num_train_epochs(
    local_trial: Callable[..., Path], tmp_path: Path
) -> None:
    store = local_trial({"epochs": 2})
    args = training_args(
        tmp_path / "out", max_steps=-1, num_train_epochs=2, eval_strategy="epoch", save_strategy="epoch"
    )
    with det.core.init() as core_context:
        trainer = train(core_context, args, filter_metrics=["loss"])

    assert trainer.state.global_step == 16  # 32 sequences in batches of 4, twice
    assert sorted(reports(store, "validation")) == [8, 16]
    assert all(set(m) == {"eval_loss"} for m in reports(store, "validation").values())
    assert all(set(m) == {"loss"} for m in reports(store, "training").values())
    completed = [e for e in read_jsonl(store / EVENTS_FILE) if e["event"] == "searcher_completed"]
    assert [e["length"] for e in completed] == [2]


@pytest.mark.parametrize(
    ("max_length", "overrides", "message"),
    [
        (
            {"batches": 8},
            {"max_steps": 5},
            "the Trainer trains batches=5 but searcher.max_length is batches=8: "
            "set TrainingArguments max_steps=8",
        ),
        (
            {"batches": 8},
            {"max_steps": -1, "num_train_epochs": 3},
            "the Trainer trains epochs=3 but searcher.max_length is batches=8: set TrainingArguments max_steps=8",
        ),
        (
            {"epochs": 2},
            {"max_steps": 8},
            "the Trainer trains batches=8 but searcher.max_length is epochs=2: "
            "set TrainingArguments num_train_epochs=2 (and leave max_steps at -1)",
        ),
    ],
)
def test_a_trainer_length_unlike_the_searchers_is_refused(
    local_trial: Callable[..., Path], tmp_path: Path, max_length: Any, overrides: dict[str, Any], message: str
) -> None:
    local_trial(max_length)
    with det.core.init() as core_context, pytest.raises(TrainerLengthError) as refused:
        DetCallback(core_context, training_args(tmp_path / "out", **overrides))
    assert str(refused.value) == message
    assert isinstance(refused.value, ValueError)  # the type Determined raises


def test_preemption_saves_a_checkpoint_and_stops_then_the_trial_resumes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runtime = FakeRuntime(length=8, preempt=True)
    config = {
        "searcher": {"name": "single", "metric": "eval_loss", "max_length": {"batches": 8}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "shared")},
    }
    for name, value in {
        trial_env.TRIAL_ID: str(runtime.trial_id),
        trial_env.EXPERIMENT_ID: "3",
        trial_env.EXPERIMENT_CONFIG: json.dumps(config),
        trial_env.MASTER: "http://master.test:8080",
        trial_env.SESSION_TOKEN: "trial-token",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_context, "_remote_backend", lambda info: RemoteBackend(runtime.client()))

    with det.core.init() as core_context:
        trainer = train(core_context, training_args(tmp_path / "out"))

    assert trainer.state.global_step == 2  # the first report asks, and the master says pause
    (saved,) = runtime.checkpoints.values()
    assert saved["steps_completed"] == 2
    assert not runtime.sent("POST", "/searcher/completed")

    runtime.preempt = False
    runtime.requests.clear()
    monkeypatch.setenv(trial_env.LATEST_CHECKPOINT, saved["uuid"])
    with det.core.init() as core_context:
        trainer = train(core_context, training_args(tmp_path / "resumed"))

    assert trainer.state.global_step == 8
    sent = [r for req in runtime.sent("POST", "/metrics") for r in req.body["reports"]]
    assert [(r["group"], r["steps_completed"]) for r in sent] == [
        ("training", 4),
        ("validation", 4),
        ("training", 6),
        ("training", 8),
        ("validation", 8),
    ]
    assert [r.body["length"] for r in runtime.sent("POST", "/searcher/completed")] == [8]


def test_determined_transformers_is_the_callback() -> None:
    code = (
        "import determined.transformers, det_airflow.transformers\n"
        "assert determined.transformers.DetCallback is det_airflow.transformers.DetCallback\n"
    )
    env = {**os.environ, "PYTHONPATH": str(compat.determined_root())}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
