"""det.pytorch.deepspeed with real DeepSpeed on CPUs (gloo): a DeepSpeedTrial written against
Determined's imports trains under the deepspeed launcher, reports, checkpoints with DeepSpeed on
every worker and resumes; local test mode runs it with one and two workers."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from det_airflow.config import load_config
from det_airflow.trial_process import (
    TrialSpec,
    entrypoint_argv,
    run_trial_process,
    trial_environment,
    write_trial_files,
)

from .conftest import Store

pytest.importorskip("deepspeed")

MODEL_DEF = textwrap.dedent(
    """\
    import deepspeed
    import torch
    from determined import pytorch
    from determined.pytorch import deepspeed as det_ds


    class Points(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(n, 4, generator=g)
            self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i], self.y[i]


    class LinearTrial(det_ds.DeepSpeedTrial):
        def __init__(self, context: det_ds.DeepSpeedTrialContext):
            self.context = context
            ds_config = det_ds.overwrite_deepspeed_config(
                {"train_batch_size": 8, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}},
                context.get_hparams().get("ds_overrides", {}),
            )
            model = torch.nn.Linear(4, 1)
            engine, _, _, _ = deepspeed.initialize(
                model=model, model_parameters=model.parameters(), config=ds_config
            )
            self.engine = context.wrap_model_engine(engine)

        def build_training_data_loader(self):
            return pytorch.DataLoader(Points(64), batch_size=self.context.train_micro_batch_size_per_gpu)

        def build_validation_data_loader(self):
            return pytorch.DataLoader(Points(16), batch_size=self.context.train_micro_batch_size_per_gpu)

        def train_batch(self, it, epoch_idx, batch_idx):
            x, y = self.context.to_device(next(it))
            loss = torch.nn.functional.mse_loss(self.engine(x), y)
            self.engine.backward(loss)
            self.engine.step()
            return {"loss": loss}

        def evaluate_batch(self, it, batch_idx):
            x, y = self.context.to_device(next(it))
            return {"validation_loss": torch.nn.functional.mse_loss(self.engine(x), y)}
    """
)


def _config(*, slots: int, max_length: int, **hparams: object) -> dict:
    return {
        "name": "ds-linear",
        "entrypoint": "python3 -m determined.launch.deepspeed --trial model_def:LinearTrial",
        "resources": {"slots_per_trial": slots},
        "hyperparameters": {"ds_overrides": {"train_micro_batch_size_per_gpu": 8 // (2 * slots)}, **hparams},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": max_length}},
        "min_validation_period": {"batches": 2},
        "scheduling_unit": 1,
        "max_restarts": 0,
    }


def _context(tmp_path: Path, config: dict) -> Path:
    folder = tmp_path / "context"
    folder.mkdir(exist_ok=True)
    (folder / "model_def.py").write_text(MODEL_DEF)
    (folder / "const.yaml").write_text(yaml.safe_dump(config))
    return folder


def _run(tmp_path: Path, config: dict, *, run_id: int = 0, latest: str | None = None) -> tuple[int, str]:
    spec = TrialSpec(
        trial_id=1, experiment_id=1, request_id="r1", trial_seed=3,
        hparams=config["hyperparameters"], config=config, latest_checkpoint=latest, run_id=run_id,
    )  # fmt: skip
    workdir = tmp_path / f"work-{run_id}"
    shutil.copytree(_context(tmp_path, config), workdir)
    write_trial_files(spec, workdir)
    env = trial_environment(spec, local_store=tmp_path / "store", workdir=workdir)
    lines: list[str] = []
    code = run_trial_process(
        workdir,
        entrypoint_argv(config["entrypoint"]),
        env,
        on_output=lambda line, _: lines.append(line),
        kill_grace=1.0,
    )
    return code, "\n".join(lines)


def test_two_workers_train_checkpoint_with_deepspeed_and_resume(tmp_path: Path, store: Store) -> None:
    code, output = _run(tmp_path, _config(slots=2, max_length=4))
    assert code == 0, output
    assert store.steps("training") == [1, 2, 3, 4]
    assert store.steps("validation") == [2, 4]
    assert {"validation_loss", "batches", "epochs"} <= set(store.metrics("validation")[-1]["metrics"])
    latest = store.checkpoints()[-1]
    assert latest["steps_completed"] == 4
    folder = tmp_path / "store" / "checkpoints" / latest["uuid"]
    # DeepSpeed's own files, and each worker's state beside them.
    assert (folder / "model0" / "mp_rank_00_model_states.pt").is_file()
    assert {p.name for p in folder.glob("det_state_dict_rank*.pth")} == {
        "det_state_dict_rank0.pth",
        "det_state_dict_rank1.pth",
    }

    code, output = _run(tmp_path, _config(slots=2, max_length=6), run_id=1, latest=latest["uuid"])
    assert code == 0, output
    assert f"resumed from checkpoint {latest['uuid']} at batch 4" in output
    assert store.steps("training") == [1, 2, 3, 4, 5, 6]
    assert store.steps("validation") == [2, 4, 6]


@pytest.mark.parametrize("slots", [1, 2])
def test_local_test_mode_runs_a_deepspeed_trial(
    tmp_path: Path, slots: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from det_airflow.cli.local_test_mode import run_local_test

    folder = _context(tmp_path, _config(slots=slots, max_length=50))
    code = run_local_test(load_config(folder / "const.yaml"), str(folder))
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "Local test mode succeeded" in out.out


def test_a_deepspeed_config_without_a_batch_size_is_one_clear_error(tmp_path: Path, store: Store) -> None:
    config = _config(slots=1, max_length=2)
    config["hyperparameters"]["ds_overrides"] = {"train_batch_size": None}
    code, output = _run(tmp_path, config)
    assert code != 0
    assert "error: DeepSpeed rejected the trial's DeepSpeed config: Either train_batch_size or " in output
    assert "Traceback" not in output
    assert store.metrics("training") == []
