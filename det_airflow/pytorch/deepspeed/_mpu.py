"""``ModelParallelUnit``: which workers are data-parallel replicas, and which of them report metrics
and read data (all of them without model parallelism)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from det_airflow.core import DistributedContext


@dataclass
class ModelParallelUnit:
    """The data-parallel position of this worker. For model parallelism of its own, a trial passes
    one to ``context.set_mpu`` after wrapping its engine."""

    data_parallel_rank: int
    data_parallel_world_size: int
    should_report_metrics: bool
    should_build_data_loader: bool


def make_data_parallel_mpu(dist_context: DistributedContext) -> ModelParallelUnit:
    """Every worker a data-parallel replica that reads data and reports metrics."""
    return ModelParallelUnit(
        data_parallel_rank=dist_context.get_rank(),
        data_parallel_world_size=dist_context.get_size(),
        should_report_metrics=True,
        should_build_data_loader=True,
    )


def make_deepspeed_mpu(topology: Any) -> ModelParallelUnit:
    """From a pipeline engine's grid (``engine.mpu``): the first and last pipeline stages read data."""
    stage, stages = topology.get_pipe_parallel_rank(), topology.get_pipe_parallel_world_size()
    reads = topology.get_slice_parallel_rank() == 0 and stage in (0, stages - 1)
    return ModelParallelUnit(
        data_parallel_rank=topology.get_data_parallel_rank(),
        data_parallel_world_size=topology.get_data_parallel_world_size(),
        should_report_metrics=True,
        should_build_data_loader=reads,
    )
