"""An S3-compatible server for the tests: moto's standalone server, in this process, on loopback."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest


def without_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process finds no AWS credentials anywhere (environment, config files, instance
    metadata): only what a test hands over reaches a bucket."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


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


@contextlib.contextmanager
def s3_server_with_auth(*buckets: str) -> Iterator[tuple[str, str, str]]:
    """``(url, key id, secret)`` while a server runs that checks every request's signature and
    permissions, as S3 does: only the key given here (an IAM user allowed ``s3:*``) is let in;
    unsigned requests and unknown keys are refused. Moto's switch is process-wide: it is turned
    back off when the block ends."""
    import uuid

    import boto3
    from moto import settings
    from moto.core.responses import ActionAuthenticatorMixin

    with s3_server(*buckets) as url:
        admin = boto3.client(
            "iam", endpoint_url=url, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
        )
        user = f"det-platform-{uuid.uuid4().hex[:8]}"  # moto's accounts outlive a server
        admin.create_user(UserName=user)
        key = admin.create_access_key(UserName=user)["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        admin.put_user_policy(UserName=user, PolicyName="checkpoints", PolicyDocument=json.dumps(policy))
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
        try:
            yield url, key["AccessKeyId"], key["SecretAccessKey"]
        finally:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
