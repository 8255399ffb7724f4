"""The Core API: what training code uses to report to the master (or, off-cluster, a local store).

Shaped like Determined's ``determined.core``::

    import det_airflow as det

    with det.core.init() as core_context:
        for op in core_context.searcher.operations():
            ...
            core_context.train.report_validation_metrics(steps, {"validation_loss": loss})
            with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, uuid):
                ...
            if core_context.preempt.should_preempt():
                return
            op.report_completed(loss)
"""

from det_airflow.core._backend import Backend
from det_airflow.core._checkpoint import CheckpointContext, DownloadMode
from det_airflow.core._context import Context, init
from det_airflow.core._distributed import DistributedContext
from det_airflow.core._local import DEFAULT_LOCAL_STORE, LocalBackend
from det_airflow.core._preempt import PreemptContext, PreemptMode
from det_airflow.core._searcher import SearcherContext, SearcherOperation
from det_airflow.core._storage import CheckpointStorage
from det_airflow.core._tensorboard import TensorboardMode
from det_airflow.core._train import EarlyExitReason, TrainContext

__all__ = [
    "DEFAULT_LOCAL_STORE",
    "Backend",
    "CheckpointContext",
    "CheckpointStorage",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "EarlyExitReason",
    "LocalBackend",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "init",
]
