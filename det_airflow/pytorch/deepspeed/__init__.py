"""DeepSpeedTrial and its Trainer: training code around DeepSpeed engines, with the loop, metrics,
checkpoints (DeepSpeed's own, sharded over the workers), preemption and resume done for it
(Determined's ``determined.pytorch.deepspeed``).

Example::

    from det_airflow.pytorch import deepspeed as det_ds

    with det_ds.init() as context:
        det_ds.Trainer(MyTrial(context), context).fit(max_length=det.pytorch.Batch(100))

A legacy experiment (``entrypoint: model_def:MyTrial``, a DeepSpeedTrial) runs the same under
``python3 -m det_airflow.launchers.deepspeed --trial model_def:MyTrial`` (or torch_distributed).
"""

from det_airflow.pytorch.deepspeed._context import DeepSpeedTrialContext
from det_airflow.pytorch.deepspeed._ds_config import get_ds_config_from_hparams, overwrite_deepspeed_config
from det_airflow.pytorch.deepspeed._init import init
from det_airflow.pytorch.deepspeed._mpu import ModelParallelUnit, make_data_parallel_mpu, make_deepspeed_mpu
from det_airflow.pytorch.deepspeed._trainer import Trainer
from det_airflow.pytorch.deepspeed._trial import DeepSpeedTrial

__all__ = [
    "DeepSpeedTrial",
    "DeepSpeedTrialContext",
    "ModelParallelUnit",
    "Trainer",
    "get_ds_config_from_hparams",
    "init",
    "make_data_parallel_mpu",
    "make_deepspeed_mpu",
    "overwrite_deepspeed_config",
]
