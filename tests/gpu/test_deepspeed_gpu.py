"""On a GPU machine: a DeepSpeedTrial written against Determined's imports trains on the one GPU its
slot leased, under Determined's deepspeed launcher entrypoint: DeepSpeed's engine on cuda:0, its
collectives over NCCL, a checkpoint DeepSpeed wrote. Skipped where no CUDA device answers."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from det_airflow.core._local import read_jsonl
from det_airflow.slots import host_devices, lease
from det_airflow.trial_process import (
    TrialSpec,
    entrypoint_argv,
    run_trial_process,
    trial_environment,
    write_trial_files,
)

torch = pytest.importorskip("torch", reason="needs a GPU: torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("needs a GPU: no CUDA device answers", allow_module_level=True)
pytest.importorskip("deepspeed", reason="needs a GPU and deepspeed: deepspeed is not installed")

from tests.unit.pytorch.test_deepspeed import MODEL_DEF, _config, _context  # noqa: E402

REPORT = """

import torch as _torch


class CudaLinearTrial(LinearTrial):
    def train_batch(self, it, epoch_idx, batch_idx):
        metrics = super().train_batch(it, epoch_idx, batch_idx)
        if batch_idx == 0:
            import torch.distributed as dist

            print("DS-GPU-CHECK", self.engine.device, dist.get_backend(), _torch.cuda.get_device_name(0), flush=True)
        return metrics
"""


def test_a_deepspeed_trial_trains_on_its_leased_gpu_over_nccl(tmp_path: Path) -> None:
    devices = host_devices("cuda", slots_per_node=None)
    assert devices, "no /dev/nvidiaN device and no CUDA_VISIBLE_DEVICES, yet torch sees a GPU"
    config = _config(slots=1, max_length=4)
    config["entrypoint"] = "python3 -m determined.launch.deepspeed --trial model_def:CudaLinearTrial"
    workdir = tmp_path / "work"
    shutil.copytree(_context(tmp_path, config), workdir)
    (workdir / "model_def.py").write_text(MODEL_DEF + REPORT)
    spec = TrialSpec(
        trial_id=1, experiment_id=1, request_id="ds-gpu", trial_seed=3,
        hparams=config["hyperparameters"], config=config,
    )  # fmt: skip
    write_trial_files(spec, workdir)
    lines: list[str] = []
    with lease("cuda", 1, devices=devices, lock_dir=tmp_path / "locks") as held:
        env = trial_environment(spec, local_store=tmp_path / "store", slot_ids=held.slot_ids, workdir=workdir)
        env.update(held.visible_devices())
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        code = run_trial_process(
            workdir, entrypoint_argv(config["entrypoint"]), env, on_output=lambda line, _: lines.append(line)
        )
    output = "\n".join(lines)
    print(output)
    assert code == 0, output
    check = next(line for line in lines if "DS-GPU-CHECK" in line).split("DS-GPU-CHECK", 1)[1].split()
    assert check[0] == "cuda:0" and check[1] == "nccl", check
    # deepspeed placed the worker on the GPU the slot leased (its world info), not on GPU 0 of a count.
    world_info = re.search(r"--world_info=(\S+)", output)
    assert world_info is not None, output
    assert json.loads(base64.urlsafe_b64decode(world_info.group(1))) == {"localhost": list(held.slot_ids)}
    store = tmp_path / "store"
    validations = [r for r in read_jsonl(store / "metrics.jsonl") if r["group"] == "validation"]
    assert [r["steps_completed"] for r in validations] == [2, 4]
    latest = [c for c in read_jsonl(store / "checkpoints.jsonl") if c.get("state") == "COMPLETED"][-1]
    assert (store / "checkpoints" / latest["uuid"] / "model0" / "mp_rank_00_model_states.pt").is_file()
