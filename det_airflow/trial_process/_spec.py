"""What a trial process runs: the master's spec of the trial, and its entrypoint as an argv."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# `module:Class` (legacy PyTorchTrial entrypoints) as one token.
_LEGACY_ENTRYPOINT = re.compile(r"^[\w.]+:\w+$")


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial process needs (the master's ``spec`` object, docs/master-api.md)."""

    trial_id: int
    experiment_id: int
    request_id: str
    trial_seed: int
    hparams: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # normalized experiment config
    latest_checkpoint: str | None = None
    steps_completed: int = 0
    run_id: int = 0  # increments each time the trial (re)starts
    # The OS identity the master assigned to the experiment's owner (gid == uid); None when the
    # master assigned none. Local, Docker and Kubernetes runners run the trial as it.
    uid: int | None = None
    gid: int | None = None
    # A run over several hosts: this node's part (addrs of every node, chief first; rank; slots;
    # the chief's rendezvous port). None: the trial runs whole here.
    gang: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialSpec:
        return cls(
            trial_id=int(data["trial_id"]),
            experiment_id=int(data["experiment_id"]),
            request_id=str(data.get("request_id") or ""),
            trial_seed=int(data.get("trial_seed") or 0),
            hparams=dict(data.get("hparams") or {}),
            config=dict(data.get("config") or {}),
            latest_checkpoint=data.get("latest_checkpoint") or None,
            steps_completed=int(data.get("steps_completed") or 0),
            run_id=int(data.get("run_id") or 0),
            uid=_optional_int(data.get("uid")),
            gid=_optional_int(data.get("gid")),
            gang=dict(data["gang"]) if data.get("gang") else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def entrypoint_argv(entrypoint: str | Sequence[str]) -> list[str]:
    """The argv of an entrypoint: a string runs with ``sh -c``, a list is exec'd as is, and a legacy
    ``module:Class`` runs under the torch_distributed launcher."""
    if isinstance(entrypoint, str):
        if _LEGACY_ENTRYPOINT.match(entrypoint.strip()):
            return [
                sys.executable,
                "-m",
                "det_airflow.launchers.torch_distributed",
                "--trial",
                entrypoint.strip(),
            ]
        return ["sh", "-c", entrypoint]
    return [str(arg) for arg in entrypoint]
