"""Checkpoint storage in an object store, reached from Airflow's side: the master deletes, collects
and serves checkpoints, and stores and reads the files of trials (master/trial_storage.py), with
the platform's credentials, which never enter a trial.

Credentials come, in this order, from the experiment's ``checkpoint_storage`` itself (Determined's
``access_key``/``secret_key`` for s3, ``connection_string`` or ``account_url`` + ``credential`` for
azure); else from the Airflow connection the section names (``aws_conn_id``, ``gcp_conn_id``,
``wasb_conn_id``: one the platform allows, the ``[det]`` default of its type or a pool's
``allowed_conn_ids``); else from the store's own chain on the machine that uses it (boto3's
environment, profile and instance role; Google's application default credentials; Azure's
``DefaultAzureCredential``).

- s3: the amazon provider's hook reads the connection, and falls back to boto3's chain when the
  connection has none. The connection's ``endpoint_url`` extra points at an S3-compatible store.
- gcs: a ``google_cloud_platform`` connection's service-account key (``keyfile_dict``, or the
  file ``key_path`` names on the machine reading it) and ``project``; its ``endpoint_url`` extra
  points at a GCS-compatible store, as an aws connection's does at an S3-compatible one.
- azure: a ``wasb`` connection read as the azure provider's hook reads it: its
  ``connection_string``, else the account URL (``host``, or the account name in ``login``) with
  ``shared_access_key``, ``sas_token`` or the key in ``password``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from det_airflow.core import _azure, _gcs
from det_airflow.core._objects import carries_credentials
from det_airflow.core._storage import CheckpointStorage
from det_airflow.errors import DetError

OBJECT_STORAGE_TYPES = ("s3", "gcs", "azure")
# An account URL of Azure's public cloud.
_AZURE_PUBLIC = re.compile(r"https://[a-z0-9]{3,24}\.blob\.core\.windows\.net")
# The field of each type's section that names its Airflow connection.
CONN_FIELDS = {"s3": "aws_conn_id", "gcs": "gcp_conn_id", "azure": "wasb_conn_id"}
# The environment variables that open a store to whoever reads them, when an experiment sets them
# itself (its environment_variables; the platform's credentials never reach a trial): a runner keeps
# them out of what others may read, as a Kubernetes pod's spec.
CREDENTIAL_VARIABLES = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        _gcs.CREDENTIALS_VARIABLE,
        _azure.CONNECTION_STRING_VARIABLE,
        _azure.CREDENTIAL_VARIABLE,
    }
)


# The fields of a section that hold credentials: Determined's own, and those the master fills in.
CREDENTIAL_FIELDS = (
    "access_key",
    "secret_key",
    "session_token",
    "credentials_info",
    "connection_string",
    "credential",
)


def without_credentials(storage: Mapping[str, Any]) -> dict[str, Any]:
    """``storage`` without the credentials it carries: what a trial that reads it through the
    master (a TensorBoard of other users' experiments) is given."""
    return {key: value for key, value in storage.items() if key not in CREDENTIAL_FIELDS}


def is_object_storage(storage: Mapping[str, Any] | None) -> bool:
    return bool(storage) and (storage or {}).get("type") in OBJECT_STORAGE_TYPES


def storage_conn_id(storage: Mapping[str, Any]) -> str:
    """The Airflow connection an object storage's credentials come from."""
    from det_airflow import settings

    kind = str(storage.get("type"))
    given = storage.get(CONN_FIELDS.get(kind, ""))
    if given:
        return str(given)
    loaded = settings.load()
    return {"gcs": loaded.gcs_conn_id, "azure": loaded.azure_conn_id}.get(kind, loaded.storage_conn_id)


def store_endpoint(storage: Mapping[str, Any]) -> tuple[str, str]:
    """The field of the section that names a store other than the provider's public one, and
    that address; ``("", "")`` when it names none. An azure connection string's ``BlobEndpoint``
    counts as its address; an account of Azure's own (``https://<account>.blob.core.windows.net``)
    is Azure's public store."""
    if storage.get("type") != "azure":
        endpoint = storage.get("endpoint_url")
        return ("endpoint_url", str(endpoint)) if endpoint else ("", "")
    named, url = "account_url", str(storage.get("account_url") or "")
    if not url:
        text = str(storage.get("connection_string") or "")
        parts = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
        named, url = "connection_string", parts.get("BlobEndpoint", "")
    return ("", "") if not url or _AZURE_PUBLIC.fullmatch(url.rstrip("/")) else (named, url)


def with_credentials(storage: Mapping[str, Any]) -> dict[str, Any]:
    """``storage`` with the credentials and endpoint of its Airflow connection filled in where
    the config gives none. An azure section that names its account (``account_url``) takes no
    connection string, which names one too: the store uses it only for that same account, as a
    trial does with ``AZURE_STORAGE_CONNECTION_STRING``."""
    resolved = dict(storage)
    if not is_object_storage(storage) or carries_credentials(storage):
        return resolved
    for key, value in connection_credentials(storage).items():
        if value and not resolved.get(key):
            resolved[key] = value
    if storage.get("type") == "azure" and storage.get("account_url") and "connection_string" in resolved:
        from det_airflow.core._azure import same_account

        connection_string = resolved.pop("connection_string")
        if same_account(connection_string, str(storage["account_url"])):
            return {**storage, "connection_string": connection_string, "account_url": None}
    return resolved


def open_storage(storage: Mapping[str, Any]) -> CheckpointStorage:
    """The checkpoint storage of an experiment's ``checkpoint_storage``, ready to use from here."""
    return CheckpointStorage.from_config(with_credentials(storage))


def connection_credentials(storage: Mapping[str, Any]) -> dict[str, Any]:
    """The section keys that the Airflow connection of ``storage`` fills in; empty when it has
    none, or when there is no such connection."""
    conn_id = storage_conn_id(storage)
    kind = storage.get("type")
    if kind == "gcs":
        return _gcs_credentials(conn_id)
    if kind == "azure":
        return _azure_credentials(conn_id)
    return _s3_credentials(conn_id)


def _airflow_connection(conn_id: str) -> Any:
    """Airflow connection ``conn_id``; None when there is none. The Task SDK's lookup, else Airflow
    core's: a Celery worker's main process (where a host removes checkpoints) runs no task, and
    there the Task SDK reads only ``AIRFLOW_CONN_*`` variables and secrets backends, not the
    metadata database."""
    from airflow.sdk import BaseHook

    from det_airflow import airflow_compat

    for lookup in (BaseHook.get_connection, airflow_compat.Connection.get_connection_from_secrets):
        try:
            return lookup(conn_id)
        except Exception:  # noqa: S112 - not found there; the next lookup may have it
            continue
    return None


def _gcs_credentials(conn_id: str) -> dict[str, Any]:
    """``credentials_info`` (a service-account key) and ``project`` of a google_cloud_platform
    connection, and its ``endpoint_url`` extra (a GCS-compatible store, such as an emulator)."""
    conn = _airflow_connection(conn_id)
    if conn is None:
        return {}
    extra = _extra(conn, "google_cloud_platform")
    found: dict[str, Any] = {
        "project": extra.get("project") or "",
        "endpoint_url": extra.get("endpoint_url") or "",
    }
    keyfile = extra.get("keyfile_dict")
    if not keyfile and extra.get("key_path"):
        try:
            with open(str(extra["key_path"]), encoding="utf-8") as file:
                keyfile = file.read()
        except OSError as exc:
            raise DetError(f"checkpoint_storage: Airflow connection {conn_id!r}: key_path: {exc}") from None
    if keyfile:
        try:
            found["credentials_info"] = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
        except ValueError:
            raise DetError(
                f"checkpoint_storage: Airflow connection {conn_id!r}: keyfile_dict is not a JSON key"
            ) from None
    return found


def _azure_credentials(conn_id: str) -> dict[str, Any]:
    """``connection_string``, or ``account_url`` and ``credential``, of a wasb connection."""
    conn = _airflow_connection(conn_id)
    if conn is None:
        return {}
    extra = _extra(conn, "wasb")
    if extra.get("connection_string"):
        return {"connection_string": extra["connection_string"]}
    account_url = ""
    if conn.host or conn.login:
        host = str(conn.host or "")
        account_url = host if host.startswith(("http://", "https://")) else ""
        if not account_url:
            account_url = f"https://{host or conn.login}.blob.core.windows.net"
    credential = (
        extra.get("shared_access_key") or extra.get("sas_token") or conn.password or extra.get("account_key")
    )
    return {"account_url": account_url, "credential": credential or ""}


def _extra(conn: Any, conn_type: str) -> dict[str, Any]:
    """A connection's extras, with the old ``extra__<type>__`` prefixes taken off."""
    prefix = f"extra__{conn_type}__"
    extra = conn.extra_dejson or {}
    return {key.removeprefix(prefix): value for key, value in extra.items() if value not in (None, "")}


def _s3_credentials(conn_id: str) -> dict[str, str]:
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
