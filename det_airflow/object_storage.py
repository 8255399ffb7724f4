"""Checkpoint storage in a bucket, reached from Airflow's side: the master (deleting, collecting
and serving checkpoints) and the trial tasks (handing the credentials to their trials).

Credentials come, in this order, from Determined's ``access_key``/``secret_key`` in the
experiment's ``checkpoint_storage``; else from the Airflow connection the storage names with
``aws_conn_id`` (one the platform allows: ``[det] storage_conn_id``, default ``aws_default``, or a
pool's ``allowed_conn_ids``), read through the amazon provider's hook, which falls back to boto3's
own chain (environment, profile, instance role) on that machine when the connection has none.
The connection's ``endpoint_url`` extra points at an S3-compatible store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.core._storage import CheckpointStorage
from det_airflow.errors import DetError

OBJECT_STORAGE_TYPES = ("s3", "gcs", "azure")
# The variable :func:`trial_variables` gives a trial for each key a connection may have.
_TRIAL_VARIABLES = {
    "access_key": "AWS_ACCESS_KEY_ID",
    "secret_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
    "endpoint_url": "AWS_ENDPOINT_URL_S3",
    "region": "AWS_DEFAULT_REGION",
}
# Those of them that open the bucket to whoever reads them (an endpoint and a region do not): a
# runner keeps them out of what others may read, as a Kubernetes pod's spec.
CREDENTIAL_VARIABLES = frozenset(
    _TRIAL_VARIABLES[key] for key in ("access_key", "secret_key", "session_token")
)


def is_object_storage(storage: Mapping[str, Any] | None) -> bool:
    return bool(storage) and (storage or {}).get("type") in OBJECT_STORAGE_TYPES


def storage_conn_id(storage: Mapping[str, Any]) -> str:
    """The Airflow connection an s3 storage's credentials come from."""
    from det_airflow import settings

    return str(storage.get("aws_conn_id") or settings.load().storage_conn_id)


def with_credentials(storage: Mapping[str, Any]) -> dict[str, Any]:
    """``storage`` with the credentials and endpoint of its Airflow connection filled in where
    the config gives none."""
    resolved = dict(storage)
    if storage.get("type") != "s3" or (storage.get("access_key") and storage.get("secret_key")):
        return resolved
    for key, value in _connection_credentials(storage_conn_id(storage)).items():
        if value and not resolved.get(key):
            resolved[key] = value
    return resolved


def open_storage(storage: Mapping[str, Any]) -> CheckpointStorage:
    """The checkpoint storage of an experiment's ``checkpoint_storage``, ready to use from here."""
    return CheckpointStorage.from_config(with_credentials(storage))


def trial_variables(storage: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``AWS_*`` variables that give a trial of this storage its credentials; none for
    storage that is not s3, or whose config carries its own keys."""
    if not storage or storage.get("type") != "s3":
        return {}
    if storage.get("access_key") and storage.get("secret_key"):
        return {}
    found = _connection_credentials(storage_conn_id(storage))
    return {_TRIAL_VARIABLES[key]: value for key, value in found.items() if value and key in _TRIAL_VARIABLES}


def _connection_credentials(conn_id: str) -> dict[str, str]:
    """access_key, secret_key, session_token, endpoint_url and region of Airflow connection
    ``conn_id`` (the provider's chain where the connection has none); empty when none is found."""
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        raise DetError(
            "checkpoint_storage type s3 needs Airflow's amazon provider on this machine: "
            "pip install 'det-airflow[s3]'"
        ) from None
    from botocore.exceptions import BotoCoreError, ClientError

    class StorageHook(AwsBaseHook):
        @classmethod
        def get_connection(cls, conn_id: str) -> Any:
            """The Task SDK's lookup, else Airflow core's: a Celery worker's main process (where a
            host removes checkpoints) runs no task, and there the Task SDK reads only
            ``AIRFLOW_CONN_*`` variables and secrets backends, not the metadata database."""
            try:
                return super().get_connection(conn_id)
            except Exception:
                from det_airflow import airflow_compat

                return airflow_compat.Connection.get_connection_from_secrets(conn_id)

    hook = StorageHook(aws_conn_id=conn_id, client_type="s3")
    try:
        config = hook.conn_config
        credentials = hook.get_credentials()
    except AttributeError:
        credentials = None  # boto3's chain found none either: the store may need none
    except (BotoCoreError, ClientError) as exc:
        raise DetError(f"checkpoint_storage: Airflow connection {conn_id!r}: {exc}") from None
    found = {
        "endpoint_url": config.endpoint_url or "",
        "region": config.region_name or "",
    }
    if credentials is not None and credentials.access_key:
        found |= {
            "access_key": credentials.access_key,
            "secret_key": credentials.secret_key or "",
            "session_token": credentials.token or "",
        }
    return found
