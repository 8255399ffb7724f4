"""What a gcs or azure storage's Airflow connection gives the master, read as the providers' hooks
read those connections; the section's own credentials win, and a connection that does not exist
gives nothing (the store's own chain then applies). None of it reaches a trial: trials reach such a
store through the master."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from det_airflow import object_storage
from det_airflow.errors import DetError
from det_airflow.operators.trial import TrialOperator

KEY = {"type": "service_account", "project_id": "ml", "private_key_id": "k1", "client_email": "ckpt@ml.iam"}
GCS = {"type": "gcs", "bucket": "ckpt"}
AZURE = {"type": "azure", "container": "ckpt"}


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_the_master_reads_the_gcs_connections_key_and_project(monkeypatch: pytest.MonkeyPatch) -> None:
    connection(
        monkeypatch, "google_cloud_default", conn_type="google_cloud_platform",
        extra={"keyfile_dict": json.dumps(KEY), "project": "ml"},
    )  # fmt: skip
    resolved = object_storage.with_credentials(GCS)
    assert resolved["credentials_info"] == KEY and resolved["project"] == "ml"


def test_a_gcs_key_file_is_read_on_the_machine_that_reads_the_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "key.json").write_text(json.dumps(KEY))
    connection(
        monkeypatch, "gcs_team_a", conn_type="google_cloud_platform",
        extra={"extra__google_cloud_platform__key_path": str(tmp_path / "key.json")},
    )  # fmt: skip
    assert object_storage.with_credentials({**GCS, "gcp_conn_id": "gcs_team_a"})["credentials_info"] == KEY


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
        object_storage.with_credentials(GCS)
    assert str(raised.value).startswith(f"checkpoint_storage: {message}")
    assert "{not json" not in str(raised.value)


def test_the_master_reads_an_azure_connections_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k3y;EndpointSuffix=core.windows.net"
    connection(monkeypatch, "wasb_default", conn_type="wasb", extra={"connection_string": text})
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
def test_the_master_reads_the_account_and_its_key_as_the_hook_reads_them(
    monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], url: str, credential: str
) -> None:
    connection(monkeypatch, "wasb_team_a", conn_type="wasb", **fields)
    resolved = object_storage.with_credentials({**AZURE, "wasb_conn_id": "wasb_team_a"})
    assert (resolved["account_url"], resolved["credential"]) == (url, credential)


def test_the_sections_own_credentials_win_over_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    connection(
        monkeypatch, "wasb_default", conn_type="wasb", extra={"connection_string": "AccountName=other"}
    )
    own = {**AZURE, "connection_string": "UseDevelopmentStorage=true"}
    assert object_storage.with_credentials(own) == own


def test_without_a_connection_the_section_stays_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", "AIRFLOW_CONN_WASB_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    assert object_storage.with_credentials(GCS) == GCS
    assert object_storage.with_credentials(AZURE) == AZURE


@pytest.mark.parametrize(
    "storage", [{"type": "s3", "bucket": "ckpt"}, GCS, AZURE], ids=["s3", "gcs", "azure"]
)
def test_a_trial_gets_none_of_the_connections_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, storage: dict[str, str]
) -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k3y;EndpointSuffix=core.windows.net"
    connection(monkeypatch, "wasb_default", conn_type="wasb", extra={"connection_string": text})
    connection(monkeypatch, "aws_default", conn_type="aws", login="AKIDPLATFORM", password="platform-secret")
    connection(
        monkeypatch, "google_cloud_default", conn_type="google_cloud_platform",
        extra={"keyfile_dict": json.dumps(KEY), "project": "ml"},
    )  # fmt: skip
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT",
        json.dumps({"conn_type": "http", "host": "http://master:8080", "password": "t"}),
    )
    spec = {"trial_id": 7, "experiment_id": 3, "config": {"entrypoint": "x", "checkpoint_storage": storage}}
    # As the trial slot's task builds the run it hands its runner (local, Docker or Kubernetes).
    operator = TrialOperator(task_id="trial", experiment_id=3, slot=0, work_dir=str(tmp_path))
    launch = operator._launch(None, spec, "trial-token")  # type: ignore[arg-type]

    env = launch.environment([])

    assert not object_storage.CREDENTIAL_VARIABLES & set(env)
    for secret in ("AKIDPLATFORM", "platform-secret", "k3y", KEY["private_key_id"]):
        assert not [name for name, value in env.items() if secret in value], secret


def test_a_tensorboard_of_another_users_experiment_gets_no_credentials_of_its_section() -> None:
    own = {"type": "s3", "bucket": "ckpt", "prefix": "p", "access_key": "AKIDBOB", "secret_key": "bobs"}
    assert object_storage.without_credentials(own) == {"type": "s3", "bucket": "ckpt", "prefix": "p"}


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
