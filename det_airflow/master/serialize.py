"""Rows of the det tables → the JSON objects of the API, as det_airflow.api.models declares them."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite keeps no zone; the master writes UTC
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def experiment(
    row: Row,
    *,
    num_trials: int | None = None,
    best_validation: float | None = None,
    placement: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """``best_validation``: the best searcher metric of its trials, where the caller computed it (the
    list); ``placement``: its (project ID, workspace ID), as ``projects.placements`` finds them."""
    project_id, workspace_id = placement or (None, None)
    return {
        "id": row.id,
        "name": row.name,
        "owner": row.owner,
        "description": row.description,
        "labels": list(row.labels or []),
        "state": row.state,
        "progress": row.progress,
        "start_time": iso(row.start_time),
        "end_time": iso(row.end_time),
        "parent_id": row.parent_id,
        "resource_pool": row.resource_pool,
        "searcher": row.searcher_name,
        "searcher_metric": (row.config.get("searcher") or {}).get("metric"),
        "best_validation": best_validation,
        "archived": row.archived,
        "dag_id": row.dag_id,
        "dag_run_id": row.dag_run_id,
        "error": row.error,
        "num_trials": num_trials,
        "notes": row.notes or "",
        "project_id": project_id,
        "workspace_id": workspace_id,
    }


def trial(row: Row, *, masked: bool = False) -> dict[str, Any]:
    """``masked``: for a reader who does not own the experiment (credentials in URLs of the
    hyperparameters masked, as in its config)."""
    best = (
        {"metric": row.best_validation, "steps_completed": row.best_validation_steps}
        if row.best_validation is not None
        else None
    )
    return {
        "id": row.id,
        "experiment_id": row.experiment_id,
        "request_id": row.request_id,
        "slot": row.slot,
        "state": row.state,
        "hparams": masked_url_credentials(row.hparams) if masked else row.hparams,
        "trial_seed": row.trial_seed,
        "start_time": iso(row.start_time),
        "end_time": iso(row.end_time),
        "total_batches": row.total_batches,
        "restarts": row.restarts,
        "progress": row.progress,
        "latest_checkpoint": row.latest_checkpoint,
        "best_validation": best,
        "summary_metrics": row.summary or {},
        "early_exit": row.early_exit,
        "stop_requested": row.stop_requested,
        "preempt_requested_at": iso(row.preempt_requested_at),
        # The Airflow task instance (and its try) that ran the trial last: a slot runs many trials.
        "airflow_task": _airflow_task(row.task),
        "host": row.host,
        "hosts": row.hosts or [],
    }


def metrics(row: Row) -> dict[str, Any]:
    return {
        "trial_id": row.trial_id,
        "group": row.group,
        "steps_completed": row.steps_completed,
        "metrics": row.metrics,
        "report_time": iso(row.report_time),
        "trial_run_id": row.trial_run_id,
    }


def checkpoint(row: Row) -> dict[str, Any]:
    return {
        "uuid": row.uuid,
        "trial_id": row.trial_id,
        "experiment_id": row.experiment_id,
        "steps_completed": row.steps_completed,
        "state": row.state,
        "metadata": row.metadata,
        "resources": row.resources,
        "size": row.size,
        "storage": row.storage,
        "report_time": iso(row.report_time),
        "validation_metric": row.validation_metric,
    }


def log_line(row: Row) -> dict[str, Any]:
    return {
        "id": row.id,
        "trial_id": row.trial_id,
        "timestamp": iso(row.timestamp),
        "container_id": row.container_id,
        "rank": row.rank,
        "level": row.level,
        "stdtype": row.stdtype,
        "message": row.message,
        "source": row.source,
    }


MASK = "********"
# checkpoint_storage and registry_auth keys whose values are credentials.
_SECRET_KEYS = frozenset(
    {
        "access_key",
        "secret_key",
        "session_token",
        "connection_string",
        "account_key",
        "sas_token",
        "credential",
        "credentials",
        "credentials_info",
        "password",
        "auth",
        "identitytoken",
        "registrytoken",
    }
)


# The user:password part of a URL (``https://user:pass@host/...``), anywhere in a string.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#@]+@")


def masked_url_credentials(value: Any) -> Any:
    """``value`` (any JSON value) with credentials inside URLs masked: ``scheme://{MASK}@host``."""
    if isinstance(value, str):
        return _URL_CREDENTIALS.sub(rf"\g<scheme>{MASK}@", value)
    if isinstance(value, list):
        return [masked_url_credentials(v) for v in value]
    if isinstance(value, dict):
        return {k: masked_url_credentials(v) for k, v in value.items()}
    return value


def masked_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config with its secrets masked: environment variable values (the variables' list and
    every ``env`` value of ``pod_spec``), storage and registry credentials, every value under
    ``data.secrets``, and credentials inside URLs anywhere. For anyone but the owner and admins."""
    masked = masked_url_credentials(config)
    environment = masked.get("environment")
    if isinstance(environment, dict):
        if "environment_variables" in environment:
            environment["environment_variables"] = _masked_variables(environment["environment_variables"])
        if isinstance(environment.get("registry_auth"), dict):
            _mask_keys(environment["registry_auth"])
        if "pod_spec" in environment:
            _mask_pod_env(environment["pod_spec"])
    if isinstance(masked.get("checkpoint_storage"), dict):
        _mask_keys(masked["checkpoint_storage"])
    data = masked.get("data")
    if isinstance(data, dict) and "secrets" in data:
        secrets = data["secrets"]
        data["secrets"] = {k: MASK for k in secrets} if isinstance(secrets, dict) else MASK
    return masked


def _masked_variables(value: Any) -> Any:
    if isinstance(value, list):
        return [_masked_variable(item) for item in value]
    if isinstance(value, dict):  # {cpu: [...], cuda: [...]}, or a NAME: VALUE mapping
        return {k: _masked_variables(v) if isinstance(v, list | dict) else MASK for k, v in value.items()}
    return MASK


def _masked_variable(item: Any) -> str:
    name, sep, _value = str(item).partition("=")
    return f"{name}={MASK}" if sep else MASK


def _mask_pod_env(node: Any) -> None:
    """Masks ``env[].value`` wherever it is in a pod spec (containers, init containers, one pod
    spec per device type); ``valueFrom`` only names a Secret and stays."""
    if isinstance(node, list):
        for item in node:
            _mask_pod_env(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                for variable in value:
                    if isinstance(variable, dict) and variable.get("value") is not None:
                        variable["value"] = MASK
            else:
                _mask_pod_env(value)


def _mask_keys(section: dict[str, Any]) -> None:
    for key, value in section.items():
        if key.lower() in _SECRET_KEYS and value is not None:
            section[key] = MASK


def _airflow_task(task: dict[str, Any] | None) -> dict[str, Any] | None:
    if not task:
        return None
    return {key: task.get(key) for key in ("dag_id", "run_id", "task_id", "map_index", "try_number")}
