"""``core_v2``: Determined's module-level Core API (``core_v2.init()``, then ``core_v2.train...``).

Inside a trial it reports to the trial's master, as ``core.init()`` does. Anywhere else it is an
*unmanaged* run: with ``DET_MASTER`` set it creates an unmanaged experiment in that master, owned by
the logged-in user (``det user login``, or ``DET_USER`` / ``DET_PASS``), with one trial that this
program is; without ``DET_MASTER`` it writes to the local store (``DET_LOCAL_STORE``, default
``./.det_local``). The config is built from ``defaults`` and ``config``. The experiment ends
COMPLETED at ``close()`` (or at exit), ERROR when the program ends with an exception.

Distributed (``distributed=DistributedContext.from_torch_distributed()`` under torchrun): the chief
creates the experiment and the other ranks receive it through the distributed context; they report
as the workers of a trial do (the chief's metrics and checkpoints count), each rank's output goes
to the trial's logs under its rank, and the chief ends the run once every rank has called
``close()``. A rank that raises ends it in ERROR.

Example::

    from determined.experimental import core_v2

    core_v2.init(defaults=core_v2.DefaultConfig(name="unmanaged", hparams={"lr": 0.1}))
    for step in range(1, 11):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
    core_v2.close()
"""

from __future__ import annotations

import atexit
import contextlib
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
from det_airflow.errors import APIError, DetError
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


def url_reverse_webui_exp_view() -> str:
    """The web UI page of this run's experiment, as Determined's: the master's address (the one
    this run reports to) followed by the experiment's page, ``/det/ui/#/experiments/<id>``. A run
    with no master (writing to the local store) has no such page: the answer is then the store's
    folder, as a ``file://`` URL."""
    if _context is None:
        raise DetError("core_v2.url_reverse_webui_exp_view(): call core_v2.init() first")
    if info is not None and info.master_url:
        from det_airflow.api._http import normalize_master_url

        return f"{normalize_master_url(info.master_url)}/det/ui/#/experiments/{info.trial.experiment_id}"
    from det_airflow.core._local import LocalBackend

    backend = _context._backend
    if isinstance(backend, LocalBackend):
        return backend.store.as_uri()
    raise DetError("core_v2.url_reverse_webui_exp_view(): this run reports to no master")


def _close(error: str | None) -> None:
    global _context, _run
    context, run = _context, _run
    _context = _run = None
    if run is None:
        if context is not None:
            context.close(failed=error is not None)
        return
    _restore_excepthook()
    atexit.unregister(_close_at_exit)
    if context is not None and context.distributed.size > 1 and error is None:
        _close_rank(context, run)
        return
    # Ending the run revokes the token that metrics and output are sent with, so they go first.
    # The process group goes last: a rank that sees this one leave finds the run already ended.
    try:
        if context is not None:
            context.train.close()
    finally:
        try:
            _stop_shipping_output()
            # Any rank that fails ends the run in ERROR, as a failing worker fails a trial.
            experiment = run.report_exit(error)
            logger.info("core_v2: unmanaged experiment %s is %s", run.experiment_id, experiment.state)
        finally:
            if context is not None:
                context.close(failed=error is not None)


def _close_rank(context: core.Context, run: UnmanagedRun) -> None:
    """A clean end of one rank of a distributed run: only the chief ends the run, once every rank's
    metrics and output are stored."""
    dist = context.distributed
    context.train.close()
    _stop_shipping_output()
    try:
        _wait_for_every_rank(dist)
    except RuntimeError:  # torch.distributed: a peer closed its connection
        problem = (
            "another rank ended without calling core_v2.close() (it failed or was stopped; see its logs)"
        )
        if dist.is_chief:
            with contextlib.suppress(APIError):  # the failing rank has usually ended the run already
                run.report_exit(problem)
        raise DetError(f"core_v2.close(): {problem}") from None
    context.close()
    if dist.is_chief:
        experiment = run.report_exit(None)
        logger.info("core_v2: unmanaged experiment %s is %s", run.experiment_id, experiment.state)


def _wait_for_every_rank(dist: DistributedContext) -> None:
    import torch.distributed

    if not torch.distributed.is_initialized():
        # The program tore its process group down first; the chief ends the run without waiting.
        logger.warning(
            "core_v2.close(): torch.distributed is no longer initialized; not waiting for the other ranks"
        )
        return
    dist.allgather(None)


def _start_unmanaged(settings: dict[str, Any], distributed: DistributedContext | None) -> core.Context:
    """Create the unmanaged experiment in the master and report to it, as a trial would."""
    global _run, _previous_excepthook
    from det_airflow.core._remote import RemoteBackend

    dist = distributed or DistributedContext()
    run = _create_or_receive_run(settings, dist)
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
        container_rank=dist.cross_rank,
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


def _create_or_receive_run(settings: dict[str, Any], dist: DistributedContext) -> UnmanagedRun:
    """The chief (rank 0) creates the experiment and its trial; the other ranks receive them, so a
    distributed run is one experiment whose ranks report as the workers of one trial."""
    from det_airflow.api.unmanaged import start_unmanaged

    def create() -> UnmanagedRun:
        hparams = dict(settings.pop("hyperparameters", None) or {})
        return start_unmanaged(
            os.environ[trial_env.MASTER],
            config=settings,
            hparams=hparams,
            command=shlex.join([sys.executable, *sys.argv]),
        )

    if dist.size == 1:
        return create()
    run: UnmanagedRun | None = None
    failure: DetError | None = None
    if dist.is_chief:
        try:
            run = create()
        except DetError as exc:
            failure = exc  # told to the other ranks too, so that none waits for a run that never comes
    answer: tuple[UnmanagedRun | None, str | None] = dist.broadcast(
        (run, str(failure) if failure is not None else None)
    )
    if failure is not None:
        raise failure
    received, message = answer
    if received is None:
        raise DetError(f"core_v2.init(): rank 0 could not create the unmanaged experiment: {message}")
    return received


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
