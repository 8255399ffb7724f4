"""``core.init()``: the Core API's entry point, made of small sub-contexts over one backend."""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_airflow import trial_env
from det_airflow.cluster_info import ClusterInfo, get_cluster_info
from det_airflow.core import _config
from det_airflow.core._backend import Backend
from det_airflow.core._checkpoint import CheckpointContext
from det_airflow.core._distributed import DistributedContext
from det_airflow.core._local import DEFAULT_LOCAL_STORE, LocalBackend
from det_airflow.core._preempt import PreemptContext, PreemptMode
from det_airflow.core._searcher import SearcherContext
from det_airflow.core._storage import CheckpointStorage, FolderStorage
from det_airflow.core._tensorboard import TensorBoardEvents, tensorboard_prefix, tensorboard_scalars
from det_airflow.core._through_master import trial_storage
from det_airflow.core._train import EarlyExitReason, TrainContext
from det_airflow.errors import InvalidHP

logger = logging.getLogger("det_airflow.core")


class Context:
    """What ``core.init()`` gives training code: ``distributed``, ``train``, ``checkpoint``,
    ``preempt``, ``searcher``, plus ``info`` (the ClusterInfo, None off-cluster).

    Used as a context manager it flushes buffered metrics and syncs the TensorBoard folder on exit.
    ``det.InvalidHP`` raised inside the block is reported as an early exit (INVALID_HP) and
    swallowed, so the process ends with exit code 0 and the searcher replaces the trial; code after
    the ``with`` block still runs, so keep the training inside it.
    """

    def __init__(
        self,
        *,
        distributed: DistributedContext,
        train: TrainContext,
        checkpoint: CheckpointContext,
        preempt: PreemptContext,
        searcher: SearcherContext,
        backend: Backend,
        info: ClusterInfo | None,
        test_mode: bool = False,
    ) -> None:
        self.distributed = distributed
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.searcher = searcher
        self.info = info
        self.test_mode = test_mode
        self._backend = backend

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool:
        if exc_type is not None and issubclass(exc_type, InvalidHP):
            logger.info("InvalidHP raised: reporting the trial as invalid and exiting cleanly")
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            self.close(failed=True)
            return True
        if exc_type is None:
            self.close()
        else:
            try:  # keep what was reported before the failure, but never hide the failure
                self.close(failed=True)
            except Exception:
                logger.exception("could not send the last metrics while handling another error")
        return False

    def alert(self, title: str | None = None, description: str | None = None, level: str = "warn") -> None:
        """Raise an alert: one line in the trial log, and on a cluster an event for the CUSTOM
        webhooks that watch the experiment (docs/webhooks.md)."""
        if self.distributed.is_chief:
            text = ": ".join(part for part in (title, description) if part) or "(no title)"
            logger.warning("ALERT [%s] %s", level, text)
            self._backend.alert(title or "", description or "", level)

    def close(self, *, failed: bool | None = None) -> None:
        """End the Core API: send what is buffered, then tear the distributed context down.
        ``failed``: this worker ends on an error (see DistributedContext.close)."""
        try:
            self.train.close()
        finally:
            self._backend.close()
            self.distributed.close(failed=failed)


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | Mapping[str, Any] | None = None,
    preempt_mode: Any = None,
    tensorboard_mode: Any = None,
    async_checkpointing: Any = None,
    config: Mapping[str, Any] | None = None,
) -> Context:
    """Start the Core API: ``with det.core.init() as core_context: ...``.

    On a trial the backend is the master (``DET_MASTER``); otherwise a local store folder
    (``DET_LOCAL_STORE``, default ``./.det_local``), so the same code runs off-cluster.

    Args:
        distributed: several workers, e.g. ``DistributedContext.from_torch_distributed()``;
            default one process.
        checkpoint_storage: off-cluster only: a folder, or a ``checkpoint_storage`` mapping; on a
            trial the experiment config's is used.
        tensorboard_mode: ``"AUTO"`` (default) writes every reported metric as a TensorBoard
            scalar into ``train.get_tensorboard_path()``; ``"MANUAL"`` leaves that folder to the
            training code. Either way the folder reaches the trial's TensorBoard.
        preempt_mode: a ``PreemptMode`` (or its value): who calls ``preempt.should_preempt()``.
        async_checkpointing: accepted for Determined code; ignored.
        config: off-cluster only: an experiment config (as loaded from YAML) for the searcher's
            length and metric; on a trial the experiment's own config (``DET_EXPERIMENT_CONFIG``) is used.
    """
    preempt = PreemptMode.parse(preempt_mode)
    info = get_cluster_info()
    dist = distributed or DistributedContext()
    test_mode = os.environ.get(trial_env.TEST_MODE, "").lower() in ("1", "true", "yes")
    experiment_config: Mapping[str, Any] = (info.trial.config if info and info.trial.config else None) or (
        config or {}
    )
    write_scalars = tensorboard_scalars(tensorboard_mode)
    storage: CheckpointStorage | None
    backend: Backend
    if info is not None and info.master_url:
        if checkpoint_storage is not None:
            logger.warning("core.init(checkpoint_storage=...) is ignored on a trial; the config's is used")
        backend = _remote_backend(info)
        storage_config = _config.checkpoint_storage(experiment_config)
        # An object store the platform holds the key of is reached through the master.
        storage = trial_storage(
            storage_config, master=info.master_url, token=info.session_token, trial_id=info.trial.trial_id
        )
        tensorboard = TensorBoardEvents.on_trial(
            storage_config,
            experiment_id=info.trial.experiment_id,
            trial_id=info.trial.trial_id,
            allocation_id=info.allocation_id,
            rank=dist.rank,
            write_scalars=write_scalars,
            master=info.master_url,
            token=info.session_token,
        )
    else:
        store = Path(os.environ.get(trial_env.LOCAL_STORE) or DEFAULT_LOCAL_STORE)
        local = LocalBackend(
            store,
            trial_id=info.trial.trial_id if info else None,
            config=experiment_config,
            test_mode=test_mode,
        )
        backend = local
        if checkpoint_storage is not None:
            storage = CheckpointStorage.from_config(checkpoint_storage)
        else:
            storage = FolderStorage(local.checkpoints_dir, type="directory")
        # Off-cluster the files are written where they are read: the local store, synced nowhere.
        ids = (info.trial.experiment_id, info.trial.trial_id) if info else (0, 0)
        tensorboard = TensorBoardEvents(local.store / tensorboard_prefix(*ids), write_scalars=write_scalars)
    # Test mode sends each report at once and asks about preemption every time, so that a loop
    # ends at its first check after reporting (see LocalBackend.should_preempt).
    batching: dict[str, Any] = {"flush_every": 1} if test_mode else {}
    train = TrainContext(dist, backend, tensorboard=tensorboard, **batching)
    return Context(
        distributed=dist,
        train=train,
        checkpoint=CheckpointContext(dist, storage, backend, train),
        preempt=PreemptContext(dist, backend, min_interval=0.0 if test_mode else 1.0, mode=preempt),
        searcher=SearcherContext(dist, backend, train),
        backend=backend,
        info=info,
        test_mode=test_mode,
    )


def _remote_backend(info: ClusterInfo) -> Backend:
    # Imported here: httpx is needed only on a trial, and `import det_airflow` stays light.
    from det_airflow.api.runtime import RuntimeClient
    from det_airflow.core._remote import RemoteBackend

    return RemoteBackend(RuntimeClient(info.master_url, info.session_token, info.trial.trial_id), watch=True)
