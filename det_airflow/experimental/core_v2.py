"""``core_v2``: Determined's module-level Core API (``core_v2.init()``, then ``core_v2.train...``).

Inside a trial it reports to the trial's master, as ``core.init()`` does. Anywhere else it is an
*unmanaged* run: with ``DET_MASTER`` set it creates an unmanaged experiment in that master, owned by
the logged-in user (``det user login``, or ``DET_USER`` / ``DET_PASS``), with one trial that this
program is; without ``DET_MASTER`` it writes to the local store (``DET_LOCAL_STORE``, default
``./.det_local``). The config is built from ``defaults`` and ``config``. The experiment ends
COMPLETED at ``close()`` (or at exit), ERROR when the program ends with an exception.

Example::

    from determined.experimental import core_v2

    core_v2.init(defaults=core_v2.DefaultConfig(name="unmanaged", hparams={"lr": 0.1}))
    for step in range(1, 11):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
    core_v2.close()
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import shlex
import sys
import traceback
import types
from typing import TYPE_CHECKING, Any

from det_airflow import core, trial_env
from det_airflow.cluster_info import ClusterInfo, TrialInfo
from det_airflow.core import (
    CheckpointContext,
    CheckpointStorage,
    DistributedContext,
    PreemptContext,
    SearcherContext,
    TrainContext,
)
from det_airflow.errors import DetError
from det_airflow.log_shipping import LogShipper, Tee

if TYPE_CHECKING:
    from det_airflow.api.unmanaged import UnmanagedRun

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
_run: UnmanagedRun | None = None
_previous_excepthook: Any = None
_shipper: LogShipper | None = None


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
    storage = (
        checkpoint_storage if checkpoint_storage is not None else settings.pop("checkpoint_storage", None)
    )
    in_trial = bool(os.environ.get(trial_env.TRIAL_ID))
    if not in_trial and os.environ.get(trial_env.MASTER) and not unmanaged:
        raise DetError(
            "core_v2.init(unmanaged=False) runs only inside a trial; outside one, pass unmanaged=True "
            f"to report to {os.environ[trial_env.MASTER]} as an unmanaged experiment"
        )
    if not in_trial and unmanaged and os.environ.get(trial_env.MASTER):
        # The external ids are Determined's links to other trackers; the master has no field for them.
        settings.pop("external_experiment_id", None)
        settings.pop("external_trial_id", None)
        if isinstance(storage, str):
            storage = {"type": "shared_fs", "host_path": os.path.abspath(storage)}
        if storage is not None:
            settings["checkpoint_storage"] = storage
        context = _start_unmanaged(settings, distributed)
    else:
        context = core.init(
            distributed=distributed,
            checkpoint_storage=storage if not in_trial else None,
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
    _close(error=None)


def _close(error: str | None) -> None:
    global _context, _run
    context, run = _context, _run
    _context = _run = None
    try:
        if context is not None:
            context.close()
    finally:
        if run is not None:
            _restore_excepthook()
            atexit.unregister(_close_at_exit)
            _stop_shipping_output()
            experiment = run.report_exit(error)
            logger.info("core_v2: unmanaged experiment %s is %s", run.experiment_id, experiment["state"])


def _start_unmanaged(settings: dict[str, Any], distributed: DistributedContext | None) -> core.Context:
    """Create the unmanaged experiment in the master and report to it, as a trial would."""
    global _run, _previous_excepthook
    from det_airflow.api.unmanaged import start_unmanaged
    from det_airflow.core._remote import RemoteBackend

    hparams = dict(settings.pop("hyperparameters", None) or {})
    master = os.environ[trial_env.MASTER]
    run = start_unmanaged(
        master, config=settings, hparams=hparams, command=shlex.join([sys.executable, *sys.argv])
    )
    dist = distributed or DistributedContext()
    backend = RemoteBackend(run.runtime_client())
    storage_config = run.config.get("checkpoint_storage")
    storage = CheckpointStorage.from_config(storage_config) if storage_config else None
    train = TrainContext(dist, backend)
    info = ClusterInfo(
        master_url=run.master,
        task_id=f"{run.experiment_id}.{run.trial_id}",
        allocation_id=f"{run.experiment_id}.{run.trial_id}.1",
        session_token=run.token,
        slot_ids=[],
        container_addrs=["127.0.0.1"],
        container_rank=0,
        latest_checkpoint=None,
        trial=TrialInfo(
            trial_id=run.trial_id,
            experiment_id=run.experiment_id,
            trial_seed=int(run.config.get("reproducibility", {}).get("experiment_seed") or 0),
            hparams=run.hparams,
            config=run.config,
            steps_completed=0,
            trial_run_id=1,
        ),
        task_type="UNMANAGED",
    )
    _run = run
    _ship_output(run, dist)
    logger.info(
        "core_v2: reporting to %s as unmanaged experiment %s, trial %s",
        run.master,
        run.experiment_id,
        run.trial_id,
    )
    # An exception that ends the program marks the experiment ERROR; a program that forgets
    # close() still ends its experiment at exit.
    _previous_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    atexit.register(_close_at_exit)
    return core.Context(
        distributed=dist,
        train=train,
        checkpoint=CheckpointContext(dist, storage, backend, train),
        preempt=PreemptContext(dist, backend),
        searcher=SearcherContext(dist, backend, train),
        backend=backend,
        info=info,
    )


def _ship_output(run: UnmanagedRun, dist: DistributedContext) -> None:
    """Tee stdout and stderr into the trial's logs (`det trial logs`), as a trial's task does."""
    global _shipper
    stderr = sys.stderr
    _shipper = LogShipper(
        run.log_sender(),
        name=f"det-logs-{run.trial_id}",
        warn=lambda message: print(f"core_v2: {message}", file=stderr),
    )
    rank = dist.rank if dist.size > 1 else None
    tees = {
        id(sys.stdout): Tee(sys.stdout, "stdout", _shipper, rank=rank),
        id(sys.stderr): Tee(sys.stderr, "stderr", _shipper, rank=rank),
    }
    sys.stdout, sys.stderr = tees[id(sys.stdout)], tees[id(sys.stderr)]
    # logging.basicConfig() before init() holds the real stream: its lines go to the logs too.
    for handler in _stream_handlers():
        tee = tees.get(id(handler.stream))
        if tee is not None:
            handler.setStream(tee)  # type: ignore[arg-type]


def _stream_handlers() -> list[logging.StreamHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]


def _stop_shipping_output() -> None:
    global _shipper
    for handler in _stream_handlers():
        if isinstance(handler.stream, Tee):
            handler.setStream(handler.stream.stream)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, Tee):
            stream.flush()
            setattr(sys, name, stream.end())
    if _shipper is not None:
        _shipper.close()
        _shipper = None


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
    previous = _previous_excepthook or sys.__excepthook__
    previous(exc_type, exc, tb)  # first, so that the traceback reaches the trial's logs too
    try:
        _close(error="".join(traceback.format_exception_only(exc_type, exc)).strip())
    except Exception:
        logger.exception("core_v2: could not report the error to the master")


def _restore_excepthook() -> None:
    if sys.excepthook is _excepthook:
        sys.excepthook = _previous_excepthook or sys.__excepthook__


def _close_at_exit() -> None:
    if _run is not None:
        close()


def _merge(defaults: DefaultConfig | None, config: Config | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for source in (defaults, config):
        if source is not None:
            out.update({k: v for k, v in dataclasses.asdict(source).items() if v is not None})
    if "hparams" in out:
        out["hyperparameters"] = out.pop("hparams")
    return out
