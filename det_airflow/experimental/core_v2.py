"""``core_v2``: Determined's module-level Core API (``core_v2.init()``, then ``core_v2.train...``).

Inside a trial it reports to the trial's master, as ``core.init()`` does; anywhere else (an
*unmanaged* run) it writes to the local store (``DET_LOCAL_STORE``, default ``./.det_local``), with
the config built from ``defaults`` and ``config``.

Example::

    from determined.experimental import core_v2

    core_v2.init(defaults=core_v2.DefaultConfig(name="unmanaged", hparams={"lr": 0.1}))
    for step in range(1, 11):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
    core_v2.close()
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from det_airflow import core, trial_env
from det_airflow.cluster_info import ClusterInfo
from det_airflow.core import (
    CheckpointContext,
    DistributedContext,
    PreemptContext,
    SearcherContext,
    TrainContext,
)
from det_airflow.errors import DetError

logger = logging.getLogger("det_airflow.core")


@dataclasses.dataclass
class DefaultConfig:
    """Experiment settings an unmanaged run uses unless ``config`` gives others."""

    name: str | None = None
    hparams: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    description: str | None = None
    labels: list[str] | None = None
    checkpoint_storage: str | dict[str, Any] | None = None
    searcher: dict[str, Any] | None = None
    workspace: str | None = None
    project: str | None = None


@dataclasses.dataclass
class Config(DefaultConfig):
    """Settings that win over ``DefaultConfig``; the external ids are accepted and recorded."""

    external_experiment_id: str | None = None
    external_trial_id: str | None = None


# Set by init(), as in Determined: training code uses them as core_v2.train, core_v2.checkpoint...
train: TrainContext
checkpoint: CheckpointContext
distributed: DistributedContext
preempt: PreemptContext
searcher: SearcherContext
info: ClusterInfo | None = None
_context: core.Context | None = None


def init(
    *,
    defaults: DefaultConfig | None = None,
    config: Config | None = None,
    unmanaged: bool = True,
    client: Any = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: Any = None,
    tensorboard_mode: Any = None,
) -> None:
    """Start the Core API for this process; ``close()`` ends it."""
    if _context is not None:
        raise DetError("core_v2.init() was already called; call core_v2.close() first")
    settings = _merge(defaults, config)
    if os.environ.get(trial_env.MASTER) and not os.environ.get(trial_env.TRIAL_ID):
        logger.warning(
            "core_v2: unmanaged runs are not sent to a det-airflow master; writing to the local store"
        )
    storage = (
        checkpoint_storage if checkpoint_storage is not None else settings.pop("checkpoint_storage", None)
    )
    context = core.init(
        distributed=distributed,
        checkpoint_storage=storage if not os.environ.get(trial_env.TRIAL_ID) else None,
        config=settings,
    )
    # A parameter shares the module attribute's name (`distributed`), hence globals().
    globals().update(
        _context=context,
        train=context.train,
        checkpoint=context.checkpoint,
        distributed=context.distributed,
        preempt=context.preempt,
        searcher=context.searcher,
        info=context.info,
    )


def close() -> None:
    """Send what is buffered and end the Core API started by ``init()``."""
    global _context
    if _context is not None:
        _context.close()
        _context = None


def _merge(defaults: DefaultConfig | None, config: Config | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for source in (defaults, config):
        if source is not None:
            out.update({k: v for k, v in dataclasses.asdict(source).items() if v is not None})
    if "hparams" in out:
        out["hyperparameters"] = out.pop("hparams")
    return out
