"""PyTorchTrial and the Trainer: training code as a class, with the loop, metrics, checkpoints,
preemption and exact resume done for it (Determined's ``determined.pytorch``).

Example::

    import det_airflow as det

    class MyTrial(det.pytorch.PyTorchTrial):
        ...

    with det.pytorch.init() as context:
        det.pytorch.Trainer(MyTrial(context), context).fit(max_length=det.pytorch.Epoch(3))

A legacy experiment (``entrypoint: model_def:MyTrial``) runs the same through
``python3 -m det_airflow.launchers.torch_distributed --trial model_def:MyTrial``, with the
experiment config's settings as the Trainer's defaults.
"""

from det_airflow.pytorch import samplers
from det_airflow.pytorch._callback import PyTorchCallback
from det_airflow.pytorch._context import PyTorchTrialContext
from det_airflow.pytorch._data import DataLoader, TorchData
from det_airflow.pytorch._init import init
from det_airflow.pytorch._lr_scheduler import LRScheduler
from det_airflow.pytorch._period import Batch, Epoch, TrainUnit
from det_airflow.pytorch._reducer import MetricReducer
from det_airflow.pytorch._trainer import Trainer
from det_airflow.pytorch._trial import PyTorchTrial

__all__ = [
    "Batch",
    "DataLoader",
    "Epoch",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "init",
    "samplers",
]
