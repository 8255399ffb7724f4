"""An S3-compatible server for the tests: moto's standalone server, in this process, on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def s3_server(*buckets: str) -> Iterator[str]:
    """Its URL while it runs, with ``buckets`` created."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        for bucket in buckets:
            s3_client(url).create_bucket(Bucket=bucket)
        yield url
    finally:
        server.stop()


def s3_client(url: str) -> Any:
    """A boto3 client of the server (it takes any keys)."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
