"""``det_ds.init()``: the Core API over DeepSpeed's process group, plus what a DeepSpeedTrial needs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from det_airflow import core
from det_airflow.cluster_info import get_cluster_info
from det_airflow.core import DistributedContext
from det_airflow.launchers.torch_distributed import LOCALHOST, free_port
from det_airflow.pytorch._init import _hparams_and_seed, _seed_everything
from det_airflow.pytorch.deepspeed._context import DeepSpeedTrialContext

# DeepSpeed's shared-memory allreduce for CPUs is a C++ extension compiled at its first use (minutes
# on a small machine, again in every fresh HOME); gloo does the same work. "1" builds and uses it.
CPU_SHM_VARIABLE = "DET_DEEPSPEED_CPU_SHM"
SHM_OP = "deepspeed_shm_comm"


@contextlib.contextmanager
def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    enable_tensorboard_logging: bool = True,
) -> Iterator[DeepSpeedTrialContext]:
    """Start training: ``with det_ds.init() as context: Trainer(MyTrial(context), context).fit()``.

    Joins DeepSpeed's process group (``deepspeed.init_distributed``: NCCL on GPUs, gloo on CPUs) with
    the ranks the ``deepspeed`` launcher (or torchrun) set, or as a single worker when there is no
    launcher, unless ``distributed`` is given. ``hparams`` and ``exp_conf`` stand in off-cluster as
    for ``det.pytorch.init``; the random generators are seeded with the trial's seed.
    """
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    own_group = False
    if distributed is None:
        if "RANK" not in os.environ:
            for name, value in (
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", LOCALHOST),
            ):
                os.environ.setdefault(name, value)
            os.environ.setdefault("MASTER_PORT", str(free_port()))
        if accelerator.device_name() == "cpu" and os.environ.get(CPU_SHM_VARIABLE) != "1":
            _leave_out_cpu_shm_kernel()
        own_group = not torch.distributed.is_initialized()
        deepspeed.init_distributed(
            dist_backend=accelerator.communication_backend_name(), auto_mpi_discovery=False
        )
        distributed = DistributedContext.from_deepspeed()
    info = get_cluster_info()
    try:
        with core.init(
            distributed=distributed,
            config=exp_conf,
            tensorboard_mode="AUTO" if enable_tensorboard_logging else "MANUAL",
        ) as core_context:
            config = dict(info.trial.config) if info and info.trial.config else dict(exp_conf or {})
            trial_hparams, seed = _hparams_and_seed(info, hparams, config)
            if accelerator.device_name() == "cpu":
                device = torch.device("cpu")
            else:
                device = torch.device(accelerator.device_name(core_context.distributed.local_rank))
                accelerator.set_device(core_context.distributed.local_rank)
            _seed_everything(seed)
            yield DeepSpeedTrialContext(
                core_context, hparams=trial_hparams, exp_conf=config, trial_seed=seed, device=device
            )
    finally:
        # Only after every worker met at the core context's final barrier (DistributedContext.close):
        # a worker ending on an error leaves the group alone, as det.pytorch.init() does.
        if own_group and distributed.ended_cleanly and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _leave_out_cpu_shm_kernel() -> None:
    import deepspeed.ops

    compatible = deepspeed.ops.__compatible_ops__
    if compatible.get(SHM_OP):
        deepspeed.ops.__compatible_ops__ = {**compatible, SHM_OP: False}
