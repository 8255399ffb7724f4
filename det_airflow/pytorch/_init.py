"""``det.pytorch.init()``: the Core API plus what a PyTorchTrial needs (hparams, seed, device, workers)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from det_airflow import core
from det_airflow.cluster_info import ClusterInfo, get_cluster_info
from det_airflow.core import DistributedContext
from det_airflow.errors import DetError
from det_airflow.launchers.torch_distributed import USE_TORCH_DISTRIBUTED
from det_airflow.legacy_trial import hparams_and_seed
from det_airflow.pytorch._context import PyTorchTrialContext

logger = logging.getLogger("det_airflow.pytorch")


@contextlib.contextmanager
def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    aggregation_frequency: int | None = None,
    enable_tensorboard_logging: bool = True,
) -> Iterator[PyTorchTrialContext]:
    """Start training: ``with det.pytorch.init() as context: Trainer(MyTrial(context), context).fit()``.

    On a trial the hyperparameters, config and seed are the trial's. Off-cluster ``hparams``
    (default: the constant hyperparameters of ``exp_conf``) and ``exp_conf`` (an experiment config as
    loaded from YAML: the searcher's length and metric, periods, ``records_per_epoch``...) stand in,
    the seed is ``reproducibility.experiment_seed`` (else 0), and metrics and checkpoints go to the
    local store (see ``det.core.init``). Under the torch_distributed launcher (or torchrun) the
    workers join one process group (NCCL on GPUs, gloo on CPUs) unless ``distributed`` is given.
    Python's, NumPy's and torch's random generators are seeded before the block runs.

    ``aggregation_frequency`` N: the optimizer steps every N batches, on the gradients of those N
    batches (averaged unless ``optimizations.average_aggregated_gradients`` is false); default
    the config's ``optimizations.aggregation_frequency``, else 1. ``enable_tensorboard_logging``
    False: the reported metrics are not written as TensorBoard events (``tensorboard_mode`` MANUAL);
    files the trial writes into ``core.train.get_tensorboard_path()`` still reach its TensorBoard.
    """
    info = get_cluster_info()
    # A CPU trial (no slots) trains on the CPU even where a GPU is visible.
    use_cuda = torch.cuda.is_available() and (info is None or bool(info.slot_ids))
    own_group = False
    if distributed is None and _launched_distributed():
        own_group = use_cuda and _init_nccl()
        distributed = DistributedContext.from_torch_distributed()
    try:
        tensorboard_mode = "AUTO" if enable_tensorboard_logging else "MANUAL"
        with core.init(
            distributed=distributed, config=exp_conf, tensorboard_mode=tensorboard_mode
        ) as core_context:
            config = dict(info.trial.config) if info and info.trial.config else dict(exp_conf or {})
            trial_hparams, seed = _hparams_and_seed(info, hparams, config)
            device = _device(core_context.distributed) if use_cuda else torch.device("cpu")
            _seed_everything(seed)
            optimizations = config.get("optimizations")
            if not isinstance(optimizations, Mapping):
                optimizations = {}
            if aggregation_frequency is None:
                aggregation_frequency = optimizations.get("aggregation_frequency", 1)
                if (
                    isinstance(aggregation_frequency, bool)
                    or not isinstance(aggregation_frequency, int)
                    or aggregation_frequency < 1
                ):
                    raise DetError(
                        "optimizations.aggregation_frequency: expected an integer >= 1, "
                        f"got {aggregation_frequency!r}"
                    )
            yield PyTorchTrialContext(
                core_context,
                hparams=trial_hparams,
                exp_conf=config,
                trial_seed=seed,
                device=device,
                aggregation_frequency=aggregation_frequency,
                average_aggregated_gradients=optimizations.get("average_aggregated_gradients", True),
            )
    finally:
        # After the Core API's close: every worker has passed its final barrier, so all destroy
        # the NCCL group together; after a failure it is left alone (see DistributedContext.close).
        if (
            own_group
            and distributed is not None
            and distributed.ended_cleanly
            and torch.distributed.is_initialized()
        ):
            torch.distributed.destroy_process_group()


def _launched_distributed() -> bool:
    env = os.environ
    return bool(env.get(USE_TORCH_DISTRIBUTED)) or ("RANK" in env and "WORLD_SIZE" in env)


def _init_nccl() -> bool:
    """NCCL for GPU workers (the Core API sets up gloo itself otherwise); True if this call made it."""
    if torch.distributed.is_initialized():
        return False
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group("nccl")
    return True


def _hparams_and_seed(
    info: ClusterInfo | None, hparams: Mapping[str, Any] | None, config: Mapping[str, Any]
) -> tuple[dict[str, Any], int]:
    if info is not None and info.trial.hparams and hparams is not None:
        logger.warning("det.pytorch.init(hparams=...) is ignored on a trial; the trial's are used")
    return hparams_and_seed(info, hparams, config)


def _device(dist: DistributedContext) -> torch.device:
    device = torch.device("cuda", dist.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed % 2**32)
