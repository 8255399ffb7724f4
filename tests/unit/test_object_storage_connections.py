"""What a gcs or azure storage's Airflow connection gives the master and the trial, read as the
providers' hooks read those connections; the section's own credentials win, and a connection that
does not exist gives nothing (the store's own chain then applies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from det_airflow import object_storage
from det_airflow.errors import DetError

KEY = {"type": "service_account", "project_id": "ml", "private_key_id": "k1", "client_email": "ckpt@ml.iam"}
GCS = {"type": "gcs", "bucket": "ckpt"}
AZURE = {"type": "azure", "container": "ckpt"}


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_a_gcs_trial_gets_the_connections_key_and_project(monkeypatch: pytest.MonkeyPatch) -> None:
    connection(
        monkeypatch, "google_cloud_default", conn_type="google_cloud_platform",
        extra={"keyfile_dict": json.dumps(KEY), "project": "ml"},
    )  # fmt: skip
    variables = object_storage.trial_variables(GCS)
    assert json.loads(variables.pop("DET_GCS_CREDENTIALS")) == KEY
    assert variables == {"GOOGLE_CLOUD_PROJECT": "ml"}
    assert object_storage.with_credentials(GCS)["credentials_info"] == KEY


def test_a_gcs_key_file_is_read_on_the_machine_that_reads_the_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "key.json").write_text(json.dumps(KEY))
    connection(
        monkeypatch, "gcs_team_a", conn_type="google_cloud_platform",
        extra={"extra__google_cloud_platform__key_path": str(tmp_path / "key.json")},
    )  # fmt: skip
    variables = object_storage.trial_variables({**GCS, "gcp_conn_id": "gcs_team_a"})
    assert json.loads(variables["DET_GCS_CREDENTIALS"]) == KEY


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"keyfile_dict": "{not json"},
            "Airflow connection 'google_cloud_default': keyfile_dict is not a JSON key",
        ),
        ({"key_path": "/no/such/key.json"}, "Airflow connection 'google_cloud_default': key_path: "),
    ],
)
def test_a_broken_gcs_connection_is_named(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], message: str
) -> None:
    connection(monkeypatch, "google_cloud_default", conn_type="google_cloud_platform", extra=extra)
    with pytest.raises(DetError) as raised:
        object_storage.trial_variables(GCS)
    assert str(raised.value).startswith(f"checkpoint_storage: {message}")
    assert "{not json" not in str(raised.value)


def test_an_azure_trial_gets_the_connections_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k3y;EndpointSuffix=core.windows.net"
    connection(monkeypatch, "wasb_default", conn_type="wasb", extra={"connection_string": text})
    assert object_storage.trial_variables(AZURE) == {"AZURE_STORAGE_CONNECTION_STRING": text}
    assert object_storage.with_credentials(AZURE)["connection_string"] == text


@pytest.mark.parametrize(
    ("fields", "url", "credential"),
    [
        ({"login": "acct", "password": "k3y"}, "https://acct.blob.core.windows.net", "k3y"),
        ({"host": "https://acct.blob.core.windows.net", "extra": {"sas_token": "sv=1&sig=s"}},
         "https://acct.blob.core.windows.net", "sv=1&sig=s"),
        ({"login": "acct", "extra": {"shared_access_key": "shared"}}, "https://acct.blob.core.windows.net", "shared"),
    ],
)  # fmt: skip
def test_an_azure_trial_gets_the_account_and_its_key_as_the_hook_reads_them(
    monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], url: str, credential: str
) -> None:
    connection(monkeypatch, "wasb_team_a", conn_type="wasb", **fields)
    variables = object_storage.trial_variables({**AZURE, "wasb_conn_id": "wasb_team_a"})
    assert variables == {"AZURE_STORAGE_ACCOUNT_URL": url, "AZURE_STORAGE_CREDENTIAL": credential}


def test_the_sections_own_credentials_win_over_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    connection(
        monkeypatch, "wasb_default", conn_type="wasb", extra={"connection_string": "AccountName=other"}
    )
    own = {**AZURE, "connection_string": "UseDevelopmentStorage=true"}
    assert object_storage.trial_variables(own) == {}
    assert object_storage.with_credentials(own) == own


def test_without_a_connection_the_trial_gets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", "AIRFLOW_CONN_WASB_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    assert object_storage.trial_variables(GCS) == {}
    assert object_storage.trial_variables(AZURE) == {}


def test_the_variables_that_open_a_store_are_the_ones_kept_secret() -> None:
    assert {"DET_GCS_CREDENTIALS", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_CREDENTIAL"} <= (
        object_storage.CREDENTIAL_VARIABLES
    )
    assert "AZURE_STORAGE_ACCOUNT_URL" not in object_storage.CREDENTIAL_VARIABLES


def test_an_azure_section_naming_its_account_takes_the_connection_string_only_for_that_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k3y;EndpointSuffix=core.windows.net"
    connection(monkeypatch, "wasb_default", conn_type="wasb", extra={"connection_string": text})
    same = object_storage.with_credentials({**AZURE, "account_url": "https://acct.blob.core.windows.net"})
    assert same["connection_string"] == text and not same.get("account_url")
    other = object_storage.with_credentials({**AZURE, "account_url": "https://other.blob.core.windows.net"})
    assert "connection_string" not in other and other["account_url"] == "https://other.blob.core.windows.net"
