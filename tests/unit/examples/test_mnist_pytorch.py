"""examples/mnist_pytorch runs off-cluster and as a local trial: metrics, checkpoints, resume, InvalidHP."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import det_airflow
from det_airflow.core._local import read_jsonl
from det_airflow.trial_process import (
    TrialSpec,
    entrypoint_argv,
    run_trial_process,
    trial_environment,
    write_trial_files,
)

pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mnist_pytorch"
REPO = Path(det_airflow.__file__).resolve().parent.parent


def _config(name: str = "const.yaml", **changes: object) -> dict:
    config = yaml.safe_load((EXAMPLE / name).read_text())
    config.update(changes)
    return config


def _run_trial(tmp_path: Path, spec: TrialSpec, **env: str) -> tuple[int, str]:
    """Runs the example as `det e create --local` runs a trial: its own work folder, the trial's env."""
    workdir = tmp_path / f"work-{spec.run_id}"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns(".det_local", "__pycache__"))
    write_trial_files(spec, workdir)
    trial_env = trial_environment(spec, local_store=tmp_path / "store", workdir=workdir)
    trial_env.update(env)
    lines: list[str] = []
    code = run_trial_process(
        workdir,
        entrypoint_argv([sys.executable, "train.py"]),
        trial_env,
        on_output=lambda line, _: lines.append(line),
        kill_grace=1.0,
    )
    return code, "\n".join(lines)


def _spec(
    run_id: int = 0, *, hparams: dict | None = None, latest: str | None = None, steps: int = 0
) -> TrialSpec:
    config = _config(searcher={"name": "single", "metric": "validation_loss", "max_length": {"batches": 30}})
    config["scheduling_unit"] = 10
    return TrialSpec(
        trial_id=1,
        experiment_id=1,
        request_id="r1",
        trial_seed=5,
        hparams=hparams if hparams is not None else config["hyperparameters"],
        config=config,
        latest_checkpoint=latest,
        steps_completed=steps,
        run_id=run_id,
    )


def test_off_cluster_it_trains_with_the_const_length_and_writes_the_local_store(tmp_path: Path) -> None:
    work = tmp_path / "mnist"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns(".det_local", "__pycache__"))
    const = _config(scheduling_unit=10)
    const["searcher"]["max_length"] = {"batches": 20}
    (work / "const.yaml").write_text(yaml.safe_dump(const))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    store = work / ".det_local"
    metrics = list(read_jsonl(store / "metrics.jsonl"))
    assert [(m["group"], m["steps_completed"]) for m in metrics] == [
        ("training", 10),
        ("validation", 10),
        ("training", 20),
        ("validation", 20),
    ]
    assert set(metrics[-1]["metrics"]) == {"validation_loss", "accuracy", "batches"}
    checkpoints = list(read_jsonl(store / "checkpoints.jsonl"))
    assert [c["steps_completed"] for c in checkpoints] == [10, 20]
    assert (store / "checkpoints" / checkpoints[-1]["uuid"] / "state.pt").is_file()


def test_a_failed_run_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    code, output = _run_trial(tmp_path, _spec(0), FAIL_ONCE_MARKER=str(marker))
    assert code == 1, output
    assert marker.exists()
    [first] = list(read_jsonl(tmp_path / "store" / "checkpoints.jsonl"))
    assert first["steps_completed"] == 10

    # The retry, as the master hands it out: the latest checkpoint and its batch count.
    code, output = _run_trial(
        tmp_path, _spec(1, latest=first["uuid"], steps=10), FAIL_ONCE_MARKER=str(marker)
    )
    assert code == 0, output
    assert f"resumed from checkpoint {first['uuid']} at batch 10" in output
    validations = [m for m in read_jsonl(tmp_path / "store" / "metrics.jsonl") if m["group"] == "validation"]
    assert [v["steps_completed"] for v in validations] == [10, 20, 30]  # continued, not restarted
    events = list(read_jsonl(tmp_path / "store" / "events.jsonl"))
    assert [e["length"] for e in events if e["event"] == "searcher_completed"] == [30]


def test_impossible_hparams_end_the_trial_as_invalid(tmp_path: Path) -> None:
    hparams = dict(_config()["hyperparameters"], n_filters1=0)
    code, output = _run_trial(tmp_path, _spec(hparams=hparams))
    assert code == 0, output
    events = list(read_jsonl(tmp_path / "store" / "events.jsonl"))
    assert [e["reason"] for e in events if e["event"] == "early_exit"] == ["INVALID_HP"]
    assert not (tmp_path / "store" / "metrics.jsonl").exists()


def test_test_mode_trains_one_batch(tmp_path: Path) -> None:
    code, output = _run_trial(tmp_path, _spec(), DET_TEST_MODE="1")
    assert code == 0, output
    metrics = list(read_jsonl(tmp_path / "store" / "metrics.jsonl"))
    assert [(m["group"], m["steps_completed"]) for m in metrics] == [("training", 1), ("validation", 1)]
    assert len(list(read_jsonl(tmp_path / "store" / "checkpoints.jsonl"))) == 1


@pytest.mark.parametrize("name", ["const.yaml", "grid.yaml", "random.yaml"])
def test_the_configs_are_valid(name: str) -> None:
    from det_airflow.config import load_config

    cfg = load_config(EXAMPLE / name)
    assert cfg.searcher.metric == "validation_loss"
    assert cfg.entrypoint == "python3 train.py"


def test_the_context_leaves_out_the_local_store() -> None:
    assert ".det_local/" in (EXAMPLE / ".detignore").read_text().splitlines()


def test_the_distributed_example_trains_on_two_gloo_ranks_and_reports_once(tmp_path: Path) -> None:
    from det_airflow.config import load_config

    assert load_config(EXAMPLE / "distributed.yaml").resources.slots_per_trial == 2
    config = _config("distributed.yaml")
    config["searcher"]["max_length"] = {"batches": 40}
    config["min_validation_period"] = {"batches": 20}
    config["scheduling_unit"] = 20
    spec = TrialSpec(
        trial_id=1,
        experiment_id=1,
        request_id="r1",
        trial_seed=5,
        hparams=config["hyperparameters"],
        config=config,
    )
    workdir = tmp_path / "work"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns(".det_local", "__pycache__"))
    write_trial_files(spec, workdir)
    env = trial_environment(spec, local_store=tmp_path / "store", workdir=workdir)
    lines: list[str] = []
    code = run_trial_process(
        workdir, entrypoint_argv(config["entrypoint"]), env, on_output=lambda line, _: lines.append(line)
    )
    output = "\n".join(lines)
    assert code == 0, output

    # One report per step, from the chief alone, although both ranks trained.
    metrics = list(read_jsonl(tmp_path / "store" / "metrics.jsonl"))
    assert [(m["group"], m["steps_completed"]) for m in metrics] == [
        ("training", 20),
        ("validation", 20),
        ("training", 40),
        ("validation", 40),
    ]
    assert [c["steps_completed"] for c in read_jsonl(tmp_path / "store" / "checkpoints.jsonl")] == [20, 40]
    assert "[rank=0] INFO: det_airflow.pytorch: validation at batch 40" in output
    # Both ranks trained, each on half of every global batch of 32.
    assert "[rank=0] worker 0 of 2: 16 images a batch" in output, output[-2000:]
    assert "[rank=1] worker 1 of 2: 16 images a batch" in output, output[-2000:]
