"""Each object store's local server behind the Airflow connection of its type, as the master's
tests and the trials' tests use them: moto's S3 server, fake-gcs-server and Azurite."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.azure_server import azure_client, azure_server
from tests.gcs_server import gcs_client, gcs_server
from tests.s3_server import s3_client, s3_server

STORE_KINDS = ("s3", "gcs", "azure")


@dataclass(frozen=True)
class Store:
    """A store's server, the connection that reaches it, and its objects as the platform sees them."""

    section: dict[str, str]
    connection: tuple[str, dict[str, Any]]  # (AIRFLOW_CONN_ variable, its JSON)
    objects: Callable[[], dict[str, bytes]]


@contextlib.contextmanager
def running_store(kind: str, bucket: str) -> Iterator[Store]:
    """The store's server with ``bucket`` (a container for azure); its section names no credentials."""
    if kind == "s3":
        with s3_server(bucket) as url:

            def s3_objects() -> dict[str, bytes]:
                client = s3_client(url)
                listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
                return {
                    o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed
                }

            connection = {"conn_type": "aws", "login": "k", "password": "s", "extra": {"endpoint_url": url}}
            yield Store(
                {"type": "s3", "bucket": bucket}, ("AIRFLOW_CONN_AWS_DEFAULT", connection), s3_objects
            )
    elif kind == "gcs":
        with gcs_server(bucket) as url:

            def gcs_objects() -> dict[str, bytes]:
                return {b.name: b.download_as_bytes() for b in gcs_client(url).bucket(bucket).list_blobs()}

            connection = {"conn_type": "google_cloud_platform", "extra": {"endpoint_url": url}}
            yield Store(
                {"type": "gcs", "bucket": bucket},
                ("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", connection),
                gcs_objects,
            )
    else:
        with azure_server(bucket) as connection_string:

            def azure_objects() -> dict[str, bytes]:
                container = azure_client(connection_string).get_container_client(bucket)
                return {b.name: container.download_blob(b.name).readall() for b in container.list_blobs()}

            connection = {"conn_type": "wasb", "extra": {"connection_string": connection_string}}
            yield Store(
                {"type": "azure", "container": bucket},
                ("AIRFLOW_CONN_WASB_DEFAULT", connection),
                azure_objects,
            )
