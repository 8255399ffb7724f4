"""The legacy entrypoint `model_def:DigitsTrial`: the launcher runs run_trial, which trains the example's
PyTorchTrial with the config's defaults, off-cluster as a local trial (no master, a local store)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from det_airflow.config import config_to_dict, load_config
from det_airflow.errors import DetError
from det_airflow.pytorch.run_trial import load_trial_class
from det_airflow.trial_process import (
    TrialSpec,
    entrypoint_argv,
    run_trial_process,
    trial_environment,
    write_trial_files,
)

from .conftest import Store

pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mnist_pytorch"


def _spec(config: dict, *, run_id: int = 0, latest: str | None = None, **hparams: object) -> TrialSpec:
    return TrialSpec(
        trial_id=1,
        experiment_id=1,
        request_id="r1",
        trial_seed=4,
        hparams={**config["hyperparameters"], **hparams},
        config=config,
        latest_checkpoint=latest,
        run_id=run_id,
    )


def _config(max_length: int) -> dict:
    config = config_to_dict(load_config(EXAMPLE / "const_trial.yaml"))
    config["hyperparameters"] = {name: hp["val"] for name, hp in config["hyperparameters"].items()}
    config["searcher"]["max_length"] = {"batches": max_length}
    config["min_validation_period"] = {"batches": 10}
    config["scheduling_unit"] = 5
    return config


def _run(tmp_path: Path, spec: TrialSpec, *, slots: int = 0, **env: str) -> tuple[int, str]:
    workdir = tmp_path / f"work-{spec.run_id}"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns(".det_local", "__pycache__"))
    write_trial_files(spec, workdir)
    trial_env = trial_environment(
        spec, local_store=tmp_path / "store", workdir=workdir, slot_ids=range(slots)
    )
    trial_env.update(env)
    lines: list[str] = []
    argv = entrypoint_argv(spec.config["entrypoint"])
    assert argv[1:] == ["-m", "det_airflow.launchers.torch_distributed", "--trial", "model_def:DigitsTrial"]
    code = run_trial_process(
        workdir, argv, trial_env, on_output=lambda line, _: lines.append(line), kill_grace=1.0
    )
    return code, "\n".join(lines)


def test_the_legacy_entrypoint_trains_and_resumes_from_the_latest_checkpoint(
    tmp_path: Path, store: Store
) -> None:
    code, output = _run(tmp_path, _spec(_config(20)))
    assert code == 0, output
    assert "[rank=0] " in output
    assert store.steps("training") == [5, 10, 15, 20]
    assert store.steps("validation") == [10, 20]
    assert set(store.metrics("validation")[-1]["metrics"]) == {
        "validation_loss",
        "accuracy",
        "batches",
        "epochs",
    }
    latest = store.checkpoints()[-1]
    assert latest["steps_completed"] == 20
    assert [e["length"] for e in store.events("searcher_completed")] == [20]

    # The next run of the trial (a longer searcher length) starts where the checkpoint left off.
    code, output = _run(tmp_path, _spec(_config(30), run_id=1, latest=latest["uuid"]))
    assert code == 0, output
    assert f"resumed from checkpoint {latest['uuid']} at batch 20" in output
    assert store.steps("training") == [5, 10, 15, 20, 25, 30]
    assert store.steps("validation") == [10, 20, 30]


def test_two_workers_train_one_trial_and_the_chief_reports(tmp_path: Path, store: Store) -> None:
    code, output = _run(tmp_path, _spec(_config(10)), slots=2)
    assert code == 0, output
    assert "[rank=0] " in output
    assert store.steps("training") == [5, 10]  # once per boundary, not once per worker
    assert store.steps("validation") == [10]
    [checkpoint] = store.checkpoints()
    state = torch.load(
        tmp_path / "store" / "checkpoints" / checkpoint["uuid"] / "state_dict.pth", weights_only=False
    )
    assert len(state["rng_states"]) == 2  # every worker's generators, for an exact resume
    # 16 per worker: an epoch of 1437 images is 89 per-slot batches, 45 steps of the two workers.
    assert state["trainer"]["epoch_length"] == 45


def test_invalid_hparams_end_the_legacy_trial_as_invalid(tmp_path: Path, store: Store) -> None:
    code, output = _run(tmp_path, _spec(_config(20), n_filters1=0))
    assert code == 0, output
    assert [e["reason"] for e in store.events("early_exit")] == ["INVALID_HP"]
    assert store.metrics("training") == []


def test_local_test_mode_is_one_batch_one_validation_one_checkpoint(tmp_path: Path, store: Store) -> None:
    code, output = _run(tmp_path, _spec(_config(300)), DET_TEST_MODE="1")
    assert code == 0, output
    assert store.steps("training") == [1]
    assert store.steps("validation") == [1]
    assert len(store.checkpoints()) == 1


def test_load_trial_class_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plain.py").write_text("class NotATrial:\n    pass\n")
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(DetError, match="expected a trial as module:Class"):
        load_trial_class("model_def")
    with pytest.raises(DetError, match="trial module 'nowhere' not found"):
        load_trial_class("nowhere:Trial")
    with pytest.raises(DetError, match="has no class 'Missing'"):
        load_trial_class("plain:Missing")
    with pytest.raises(
        DetError,
        match="is not a det.pytorch.PyTorchTrial, det.pytorch.deepspeed.DeepSpeedTrial or det.keras.TFKerasTrial subclass",
    ):
        load_trial_class("plain:NotATrial")
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        load_trial_class("broken:Trial")


def test_the_runner_exits_with_its_code_after_exit_handlers_and_flushed_output(tmp_path: Path) -> None:
    # The runner leaves without tearing the interpreter down (gloo's threads may still run then):
    # what the trial's module registered to run at exit still runs, and nothing buffered is lost.
    (tmp_path / "plain.py").write_text(
        "import atexit, sys\n"
        "print('buffered, no newline', end='')\n"
        "atexit.register(lambda: print(' | exit handler ran'))\n"
        "class NotATrial:\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "det_airflow.pytorch.run_trial", "plain:NotATrial"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout == "buffered, no newline | exit handler ran\n"
    assert "error: plain:NotATrial is not a det.pytorch.PyTorchTrial" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "name", ["const_trial.yaml", "adaptive_trial.yaml", "adaptive.yaml", "adaptive_time.yaml"]
)
def test_the_example_configs_are_valid(name: str) -> None:
    cfg = load_config(EXAMPLE / name)
    assert cfg.searcher.metric == "validation_loss"
    if "trial" in name:
        assert cfg.entrypoint == "model_def:DigitsTrial"
    if name.startswith("adaptive"):
        assert cfg.searcher.name == "adaptive_asha" and cfg.searcher.max_trials == 8


def test_the_adaptive_configs_validate_at_every_rung() -> None:
    """ASHA (max_trials 8, divisor 4, length 200) has rungs at 50 and 200 batches: every config
    validates at least that often."""
    for name in ("adaptive_trial.yaml", "adaptive.yaml", "adaptive_time.yaml"):
        config = yaml.safe_load((EXAMPLE / name).read_text())
        period = config.get("min_validation_period", {}).get("batches") or config["scheduling_unit"]
        assert 50 % period == 0, name
