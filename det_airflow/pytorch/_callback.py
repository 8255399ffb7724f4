"""``PyTorchCallback``: hooks a PyTorchTrial hands the Trainer through ``build_callbacks()``."""

from __future__ import annotations

from typing import Any


class PyTorchCallback:
    """Override the hooks you need; the Trainer calls them at the points Determined does.

    Every hook runs on every worker. A callback's :meth:`state_dict` is saved with each checkpoint
    and given back to :meth:`load_state_dict` when a trial resumes from it.

    Example::

        class Announce(det.pytorch.PyTorchCallback):
            def on_validation_end(self, metrics):
                print("validated:", metrics)

        class MyTrial(det.pytorch.PyTorchTrial):
            def build_callbacks(self):
                return {"announce": Announce()}
    """

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before anything else; ``first_batch_idx`` is where training starts (0 unless resumed)."""

    def on_trial_shutdown(self) -> None:
        """After training ends, however it ends."""

    def on_training_start(self) -> None:
        """Once, before the first training batch of this run."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of each epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of each epoch."""

    def on_training_workload_end(self, avg_metrics: dict[str, Any], batch_metrics: Any) -> None:
        """After each reporting period, with its averaged training metrics."""

    def on_validation_start(self) -> None:
        """Before each validation."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After each validation, with its metrics."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written; ``checkpoint`` is the state about to be saved."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint's files are written to ``checkpoint_dir``."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint is complete (Determined's older name for the write end)."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is stored and registered under ``uuid``."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint's state is loaded into the models and optimizers."""

    def state_dict(self) -> dict[str, Any]:
        """State to save with each checkpoint."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
