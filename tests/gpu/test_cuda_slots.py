"""On a GPU machine: a 1-slot trial under the torch_distributed launcher gets exactly the GPU its
slot leased, and trains over NCCL. Skipped where no CUDA device answers."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from det_airflow import trial_env
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

TRAIN = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist
    from det_airflow import pytorch as det_pytorch

    with det_pytorch.init(exp_conf={"searcher": {"name": "single", "metric": "loss"}}) as context:
        device = context.device
        x = torch.ones(4, device=device) * (dist.get_rank() + 1)
        dist.all_reduce(x)
        print("GPU-CHECK " + json.dumps({
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "slot_ids": json.loads(os.environ["DET_SLOT_IDS"]),
            "device_count": torch.cuda.device_count(),
            "device": str(device),
            "name": torch.cuda.get_device_name(device),
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "sum": float(x[0]),
        }), flush=True)
    """
)


def test_a_one_slot_trial_sees_its_leased_gpu_and_uses_nccl(tmp_path: Path) -> None:
    devices = host_devices("cuda", slots_per_node=None)
    assert devices, "no /dev/nvidiaN device and no CUDA_VISIBLE_DEVICES, yet torch sees a GPU"
    (tmp_path / "train.py").write_text(TRAIN)
    config = {
        "entrypoint": "python3 -m det_airflow.launchers.torch_distributed -- python3 train.py",
        "resources": {"slots_per_trial": 1},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "hyperparameters": {},
    }
    spec = TrialSpec(trial_id=1, experiment_id=1, request_id="gpu-check", trial_seed=0, config=config)
    write_trial_files(spec, tmp_path)
    lines: list[str] = []
    with lease("cuda", 1, devices=devices, lock_dir=tmp_path / "locks") as held:
        env = trial_environment(
            spec, local_store=tmp_path / "store", slot_ids=held.slot_ids, workdir=tmp_path
        )
        env.update(held.visible_devices())
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        code = run_trial_process(
            tmp_path, entrypoint_argv(config["entrypoint"]), env, on_output=lambda line, _: lines.append(line)
        )
    output = "\n".join(lines)
    assert code == 0, output
    print(output)
    # The launcher prefixes each line with its rank.
    report = json.loads(next(line for line in lines if "GPU-CHECK " in line).split("GPU-CHECK ", 1)[1])
    assert report["visible"] == str(held.slot_ids[0])
    assert report["slot_ids"] == list(held.slot_ids)
    assert report["device_count"] == 1
    assert report["device"] == "cuda:0"
    assert report["backend"] == "nccl"
    assert report["world_size"] == 1
    assert report["sum"] == 1.0
    assert env[trial_env.SLOT_IDS] == json.dumps(list(held.slot_ids))
