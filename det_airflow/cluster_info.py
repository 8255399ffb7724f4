"""What a trial process knows about itself, read from the ``DET_*`` environment (docs/semantics.md §3)
and the config file it names.

``det.get_cluster_info()`` answers None for a plain ``python3 train.py``; inside a trial (one the
master launched, or one ``det experiment create --local`` runs) it answers a :class:`ClusterInfo`.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_airflow import trial_env
from det_airflow.errors import DetError

# Any of these marks the process as a trial; a plain run has none of them. Not DET_MASTER: people
# export it for the `det` CLI, and `python3 train.py` in that shell is still off-cluster.
_TRIAL_MARKERS = (
    trial_env.TRIAL_ID,
    trial_env.EXPERIMENT_CONFIG_FILE,
    trial_env.EXPERIMENT_CONFIG,
    trial_env.HPARAMS,
)


@dataclass(frozen=True)
class TrialInfo:
    """The trial this process trains."""

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    steps_completed: int
    trial_run_id: int = 0

    @property
    def _config(self) -> dict[str, Any]:
        """Determined's name for :attr:`config` (the experiment config), read by its examples."""
        return self.config


@dataclass(frozen=True)
class ClusterInfo:
    """Where and what this trial process is: master, allocation, slots, ranks, and the trial itself."""

    master_url: str | None
    task_id: str
    allocation_id: str
    session_token: str | None
    slot_ids: list[int]
    container_addrs: list[str]
    container_rank: int
    latest_checkpoint: str | None
    trial: TrialInfo
    task_type: str = "TRIAL"
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    agent_id: str = ""

    @property
    def _trial_info(self) -> TrialInfo:
        """Determined's name for :attr:`trial`, used by its own training loops."""
        return self.trial

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's free-form ``data`` section."""
        data = self.trial.config.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    @property
    def cluster_id(self) -> str:
        return self.master_url or "local"


def get_cluster_info() -> ClusterInfo | None:
    """The running trial's ClusterInfo, or None when this process is not a trial (off-cluster)."""
    return cluster_info_from_env(os.environ)


def cluster_info_from_env(env: Mapping[str, str]) -> ClusterInfo | None:
    """Build ClusterInfo from an environment mapping (``os.environ`` for the real thing)."""
    if not any(env.get(name) for name in _TRIAL_MARKERS):
        return None
    trial_id = _int(env, trial_env.TRIAL_ID, 0)
    experiment_id = _int(env, trial_env.EXPERIMENT_ID, 0)
    run_id = _int(env, trial_env.TRIAL_RUN_ID, 0)
    task_id = env.get(trial_env.TASK_ID) or f"{experiment_id}.{trial_id}"
    chief_ip = env.get(trial_env.CHIEF_IP) or "127.0.0.1"
    trial = TrialInfo(
        trial_id=trial_id,
        experiment_id=experiment_id,
        trial_seed=_int(env, trial_env.TRIAL_SEED, 0),
        hparams=_json_object(env, trial_env.HPARAMS),
        config=_experiment_config(env),
        steps_completed=_int(env, trial_env.STEPS_COMPLETED, 0),
        trial_run_id=run_id,
    )
    return ClusterInfo(
        master_url=env.get(trial_env.MASTER) or None,
        task_id=task_id,
        allocation_id=env.get(trial_env.ALLOCATION_ID) or f"{task_id}.{run_id}",
        session_token=env.get(trial_env.SESSION_TOKEN) or None,
        slot_ids=[int(s) for s in _json_list(env, trial_env.SLOT_IDS)],
        container_addrs=[str(a) for a in _json_list(env, trial_env.CONTAINER_ADDRS)] or [chief_ip],
        container_rank=_int(env, trial_env.CONTAINER_RANK, 0),
        latest_checkpoint=env.get(trial_env.LATEST_CHECKPOINT) or None,
        trial=trial,
        agent_id=env.get(trial_env.AGENT_ID) or socket.gethostname(),
    )


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise DetError(f"environment variable {name}: expected an integer, got {value!r}") from None


def _json(env: Mapping[str, str], name: str, where: str | None = None) -> Any:
    value = env.get(name)
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise DetError(f"{where or f'environment variable {name}'}: not valid JSON ({exc})") from None


def _json_object(env: Mapping[str, str], name: str, where: str | None = None) -> dict[str, Any]:
    value = _json(env, name, where)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DetError(
            f"{where or f'environment variable {name}'}: expected a JSON object, got {type(value).__name__}"
        )
    return value


def _experiment_config(env: Mapping[str, str]) -> dict[str, Any]:
    """The config from ``DET_EXPERIMENT_CONFIG`` (JSON) when set, else from the file that
    ``DET_EXPERIMENT_CONFIG_FILE`` names (how trials receive it: a config can outgrow what one
    environment variable may hold)."""
    if env.get(trial_env.EXPERIMENT_CONFIG):
        return _json_object(env, trial_env.EXPERIMENT_CONFIG)
    path = env.get(trial_env.EXPERIMENT_CONFIG_FILE)
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise DetError(
            f"environment variable {trial_env.EXPERIMENT_CONFIG_FILE}: cannot read {path} ({exc.strerror or exc})"
        ) from None
    return _json_object(
        {trial_env.EXPERIMENT_CONFIG_FILE: text}, trial_env.EXPERIMENT_CONFIG_FILE, f"file {path}"
    )


def _json_list(env: Mapping[str, str], name: str) -> list[Any]:
    """A JSON list (``[0, 1]``); a comma list (``0,1``) or a bare scalar is tolerated."""
    value = (env.get(name) or "").strip()
    if not value:
        return []
    try:
        parsed = json.loads(value)
    except ValueError:
        return [v.strip() for v in value.split(",") if v.strip()]
    return parsed if isinstance(parsed, list) else [parsed]
