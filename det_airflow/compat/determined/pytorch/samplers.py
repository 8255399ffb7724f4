"""``determined.pytorch.samplers``: det-airflow's batch samplers (``det_airflow.pytorch.samplers``)."""

from det_airflow.pytorch.samplers import DistributedBatchSampler, RepeatBatchSampler, SkipBatchSampler

__all__ = ["DistributedBatchSampler", "RepeatBatchSampler", "SkipBatchSampler"]
