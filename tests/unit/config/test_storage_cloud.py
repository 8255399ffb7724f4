"""gcs and azure checkpoint_storage: their own fields are checked with the config, and kept as given."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import parse_config

from ._configs import minimal, problems_of

GCS = {"type": "gcs", "bucket": "ckpts"}
AZURE = {"type": "azure", "container": "ckpts"}


@pytest.mark.parametrize(
    ("section", "path", "message"),
    [
        (
            {"type": "gcs"},
            "checkpoint_storage.bucket",
            "required for gcs storage; expected a non-empty string",
        ),
        (
            {**GCS, "endpoint_url": "fake-gcs:4443"},
            "checkpoint_storage.endpoint_url",
            "expected an http:// or https:// URL, got 'fake-gcs:4443'",
        ),
        ({**GCS, "gcp_conn_id": ""}, "checkpoint_storage.gcp_conn_id", "expected a non-empty string, got ''"),
        ({**GCS, "project": 7}, "checkpoint_storage.project", "expected a non-empty string, got 7"),
        (
            {"type": "azure", "bucket": "b"},
            "checkpoint_storage.container",
            "required for azure storage; expected a non-empty string",
        ),
        (
            {**AZURE, "credential": "k3y"},
            "checkpoint_storage.account_url",
            "required with credential; expected the account's URL",
        ),
        (
            {**AZURE, "account_url": "acct.blob.core.windows.net"},
            "checkpoint_storage.account_url",
            "expected an http:// or https:// URL, got 'acct.blob.core.windows.net'",
        ),
        (
            {**AZURE, "connection_string": "AccountName=a", "account_url": "https://a.blob.core.windows.net"},
            "checkpoint_storage.account_url",
            "expected no account_url with connection_string (it names the account), "
            "got 'https://a.blob.core.windows.net'",
        ),
        (
            {**AZURE, "wasb_conn_id": ""},
            "checkpoint_storage.wasb_conn_id",
            "expected a non-empty string, got ''",
        ),
    ],
)
def test_a_bad_field_is_named(section: dict[str, Any], path: str, message: str) -> None:
    assert problems_of(minimal(checkpoint_storage=section)) == [(path, message)]


@pytest.mark.parametrize(
    "section",
    [
        {**GCS, "prefix": "team-a", "gcp_conn_id": "gcs_team_a", "project": "ml"},
        {**AZURE, "prefix": "team-a", "account_url": "https://acct.blob.core.windows.net", "credential": "k"},
        {**AZURE, "connection_string": "UseDevelopmentStorage=true"},
        {**AZURE, "wasb_conn_id": "wasb_team_a"},
    ],
)
def test_a_complete_section_is_accepted_and_kept(section: dict[str, Any]) -> None:
    storage = parse_config(minimal(checkpoint_storage=section)).checkpoint_storage
    assert storage is not None and storage.type == section["type"]
    own = {"type", "bucket", "container", "prefix"}
    assert storage.options == {k: v for k, v in section.items() if k not in own}
