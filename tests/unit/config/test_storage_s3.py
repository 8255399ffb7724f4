"""s3 checkpoint_storage: its own fields are checked with the config, and kept as given."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import parse_config

from ._configs import minimal, problems_of

S3 = {"type": "s3", "bucket": "ckpts"}


@pytest.mark.parametrize(
    ("extra", "path", "message"),
    [
        (
            {"endpoint_url": "minio:9000"},
            "checkpoint_storage.endpoint_url",
            "expected an http:// or https:// URL, got 'minio:9000'",
        ),
        ({"endpoint_url": 9000}, "checkpoint_storage.endpoint_url", "expected a non-empty string, got 9000"),
        (
            {"access_key": "AKIA"},
            "checkpoint_storage.secret_key",
            "required with access_key; expected a non-empty string",
        ),
        (
            {"secret_key": "s3cr3t"},
            "checkpoint_storage.access_key",
            "required with secret_key; expected a non-empty string",
        ),
        ({"aws_conn_id": ""}, "checkpoint_storage.aws_conn_id", "expected a non-empty string, got ''"),
        (
            {"region": ["eu-west-1"]},
            "checkpoint_storage.region",
            "expected a non-empty string, got ['eu-west-1']",
        ),
    ],
)
def test_a_bad_s3_field_is_named(extra: dict[str, Any], path: str, message: str) -> None:
    assert problems_of(minimal(checkpoint_storage={**S3, **extra})) == [(path, message)]


def test_a_complete_s3_section_is_accepted_and_kept() -> None:
    extra = {"endpoint_url": "https://minio.lan:9000", "aws_conn_id": "minio", "region": "eu-west-1"}
    storage = parse_config(minimal(checkpoint_storage={**S3, **extra})).checkpoint_storage
    assert storage is not None and storage.options == extra
