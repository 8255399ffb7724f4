"""Client of the master's unmanaged-experiment routes, for ``core_v2.init(unmanaged=True)``.

A person's login (``det user login``, or ``DET_USER`` / ``DET_PASS``) creates the experiment; the
program then reports with the trial token the master answers, as training code on a trial does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from det_airflow.api._http import TrialSession
from det_airflow.api.models import Experiment, ExperimentAnswer, UnmanagedRunAnswer
from det_airflow.api.runtime import RuntimeClient
from det_airflow.api.user import connect


@dataclass(frozen=True)
class UnmanagedRun:
    """An unmanaged experiment the master created for this program, with its one trial."""

    master: str
    experiment_id: int
    trial_id: int
    token: str
    config: dict[str, Any]
    hparams: dict[str, Any]

    def runtime_client(self) -> RuntimeClient:
        """The client training code reports through (metrics, checkpoints, progress, preemption)."""
        return RuntimeClient(self.master, self.token, self.trial_id)

    def log_sender(self) -> Callable[[list[dict[str, Any]]], None]:
        """Posts batches of the program's output lines (LogShipper's `ship`); one connection,
        used from the shipper's thread only."""
        session = TrialSession(self.master, self.token)

        def send(batch: list[dict[str, Any]]) -> None:
            session.post(f"/runtime/trials/{self.trial_id}/unmanaged/logs", {"logs": batch})

        return send

    def report_exit(self, error: str | None = None) -> Experiment:
        """Tell the master the program ended: COMPLETED, or ERROR with ``error``. Answers the experiment."""
        with TrialSession(self.master, self.token) as session:
            answer = session.post(f"/runtime/trials/{self.trial_id}/unmanaged/exit", {"error": error})
        return ExperimentAnswer.model_validate(answer).experiment


def start_unmanaged(
    master: str | None,
    *,
    config: dict[str, Any],
    hparams: dict[str, Any],
    command: str | None = None,
) -> UnmanagedRun:
    """Create an unmanaged experiment owned by the logged-in user.

    Raises:
        APIError: Not logged in, not allowed to create experiments, or an invalid ``config``.
    """
    with connect(master) as client:
        answer = client._answer(
            UnmanagedRunAnswer,
            "POST",
            "/experiments/unmanaged",
            json={"config": config, "hparams": hparams, "command": command},
        )
        return UnmanagedRun(
            master=client.master,
            experiment_id=answer.experiment.id,
            trial_id=answer.trial.id,
            token=answer.token,
            config=answer.config,
            hparams=answer.trial.hparams,
        )
