"""Checkpoints in an Azure Blob Storage container through the Core API, against Azurite.

A checkpoint is the blobs under ``<prefix>/<uuid>/``; they appear only once the whole checkpoint
is written, a failure leaves none, and every mistake a user can make is one line naming the
container.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from det_airflow import core
from det_airflow.core import CheckpointStorage, _azure
from det_airflow.core._azure import AzureStorage
from det_airflow.core._local import read_jsonl
from det_airflow.errors import DetError
from tests.azure_server import ACCOUNT, ACCOUNT_KEY, azure_client, azure_server, blobs

from .conftest import FakeRuntime


@pytest.fixture(scope="module")
def connection_string() -> Iterator[str]:
    """A connection string of Azurite's development account, on a server running for the module."""
    with azure_server() as connection_string:
        yield connection_string


@pytest.fixture
def account_url(connection_string: str) -> str:
    return azure_client(connection_string).url.rstrip("/")


@pytest.fixture(autouse=True)
def no_azure_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the machine's Azure setup (its AZURE_* variables) reaches a test."""
    for name in list(os.environ):
        if name.startswith("AZURE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def container(connection_string: str) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    azure_client(connection_string).create_container(name)
    return name


@pytest.fixture
def storage(connection_string: str, container: str) -> dict[str, Any]:
    """An experiment's ``checkpoint_storage`` section for the container, credentials included."""
    return {
        "type": "azure",
        "container": container,
        "prefix": "team-a",
        "connection_string": connection_string,
    }


def store(ctx: core.Context, files: dict[str, bytes], steps: int = 1) -> str:
    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
        for name, data in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
    return storage_id


def test_a_stored_checkpoint_is_restored_byte_for_byte(
    storage: dict[str, Any], connection_string: str, container: str
) -> None:
    weights = os.urandom(9 * 1024 * 1024 + 5)  # past the 4 MiB of one request: sent in blocks
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"model.pt": weights, "optim/state.pt": b"adam"})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "model.pt").read_bytes() == weights
            assert (path / "optim" / "state.pt").read_bytes() == b"adam"
        assert not path.exists()  # the downloaded copy is gone with the block
    stored = blobs(connection_string, container)
    assert sorted(stored) == [
        f"team-a/{storage_id}/{n}" for n in ("metadata.json", "model.pt", "optim/state.pt")
    ]
    assert stored[f"team-a/{storage_id}/model.pt"] == weights
    blob = azure_client(connection_string).get_blob_client(container, f"team-a/{storage_id}/model.pt")
    assert len(blob.get_block_list()[0]) == 3


def test_nothing_is_in_the_container_until_the_block_ends(
    storage: dict[str, Any], connection_string: str, container: str
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "w.bin").write_bytes(b"1234")
            assert blobs(connection_string, container) == {}
        assert not path.exists()  # the local folder written into is removed once uploaded
    assert len(blobs(connection_string, container)) == 2


def test_the_checkpoint_is_registered_with_where_it_lives_and_no_credentials(
    storage: dict[str, Any], account_url: str, container: str, tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"1234"})
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["storage"] == {
        "type": "azure",
        "container": container,
        "key": f"team-a/{storage_id}/",
        "account_url": account_url,
    }
    assert record["resources"]["w.bin"] == 4
    assert ACCOUNT_KEY not in json.dumps(record)


def test_a_sas_token_stays_out_of_the_record(
    container: str, account_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    sas = generate_account_sas(
        ACCOUNT,
        ACCOUNT_KEY,
        ResourceTypes(container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", f"BlobEndpoint={account_url};SharedAccessSignature={sas}"
    )
    with core.init(checkpoint_storage={"type": "azure", "container": container}) as ctx:
        store(ctx, {"w.bin": b"1"})
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["storage"]["account_url"] == account_url
    assert "sig=" not in json.dumps(record)


def test_on_a_trial_the_master_hears_of_the_checkpoint_after_its_upload(
    remote_init: Callable,
    fake_runtime: FakeRuntime,
    storage: dict[str, Any],
    connection_string: str,
    container: str,
) -> None:
    with remote_init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"1234"}, steps=10)
    [registered] = fake_runtime.sent("POST", "/checkpoints")
    assert registered.body["uuid"] == storage_id and registered.body["steps_completed"] == 10
    assert set(registered.body["resources"]) == {"w.bin", "metadata.json"}
    assert set(blobs(connection_string, container)) == {
        f"team-a/{storage_id}/w.bin",
        f"team-a/{storage_id}/metadata.json",
    }


def test_a_folder_uploads_and_downloads_with_its_subfolders(storage: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_text("top")
    (src / "a" / "b" / "deep.bin").write_bytes(b"\x00\x01")
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = ctx.checkpoint.upload(src, {"steps_completed": 5, "note": "x"})
        ctx.checkpoint.download(storage_id, tmp_path / "copy")
    assert (tmp_path / "copy" / "top.txt").read_text() == "top"
    assert (tmp_path / "copy" / "a" / "b" / "deep.bin").read_bytes() == b"\x00\x01"


def test_metadata_comes_from_the_container_when_the_master_has_no_record(
    remote_init: Callable, fake_runtime: FakeRuntime, storage: dict[str, Any]
) -> None:
    with remote_init(checkpoint_storage=storage) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 3, "framework": "torch"}) as (_, storage_id):
            pass
        fake_runtime.checkpoints.clear()
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 3, "framework": "torch"}


def test_delete_removes_every_blob_of_the_checkpoint_and_no_other(
    storage: dict[str, Any], connection_string: str, container: str, tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        kept = store(ctx, {"w.bin": b"kept"})
        gone = store(ctx, {f"shard-{i}.bin": b"x" for i in range(5)} | {"sub/w.bin": b"y"})
        ctx.checkpoint.delete(gone)
    assert sorted(blobs(connection_string, container)) == [
        f"team-a/{kept}/metadata.json",
        f"team-a/{kept}/w.bin",
    ]
    deleted = [r for r in read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl") if r["uuid"] == gone]
    assert deleted[-1]["state"] == "DELETED"


def test_delete_goes_past_one_batch_and_a_blob_already_gone_is_no_error(
    storage: dict[str, Any], connection_string: str, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = azure_client(connection_string).get_container_client(container)
    for i in range(5):
        client.upload_blob(f"team-a/many/{i}.bin", b"")
    monkeypatch.setattr(_azure, "_BATCH", 2)  # Azure's batches hold up to 256 deletes; these hold 2
    azure_storage = AzureStorage.from_config(storage)
    azure_storage._delete("many", [f"team-a/many/{i}.bin" for i in range(6)])  # 5.bin was never there
    assert blobs(connection_string, container) == {}


def test_a_store_that_refuses_batches_has_its_blobs_deleted_one_by_one(
    storage: dict[str, Any], connection_string: str, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    def no_batches(*args: Any, **kwargs: Any) -> None:
        raise HttpResponseError(message="Internal Server Error")  # Azurite's answer to a batch under a SAS

    monkeypatch.setattr(ContainerClient, "delete_blobs", no_batches)
    with core.init(checkpoint_storage=storage) as ctx:
        kept = store(ctx, {"w.bin": b"kept"})
        gone = store(ctx, {"a.bin": b"a", "sub/b.bin": b"b"})
        ctx.checkpoint.delete(gone)
    assert sorted(blobs(connection_string, container)) == [
        f"team-a/{kept}/metadata.json",
        f"team-a/{kept}/w.bin",
    ]


def test_a_failure_inside_the_block_uploads_and_registers_nothing(
    remote_init: Callable,
    fake_runtime: FakeRuntime,
    storage: dict[str, Any],
    connection_string: str,
    container: str,
) -> None:
    with remote_init(checkpoint_storage=storage) as ctx, pytest.raises(OSError, match="disk full"):
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "half.pt").write_bytes(b"x")
            raise OSError("disk full")
    assert not path.exists()
    assert blobs(connection_string, container) == {}
    assert fake_runtime.sent("POST", "/checkpoints") == []


def test_an_upload_failing_midway_takes_back_what_it_sent(
    remote_init: Callable,
    fake_runtime: FakeRuntime,
    storage: dict[str, Any],
    connection_string: str,
    container: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from azure.core.exceptions import ServiceRequestError

    with remote_init(checkpoint_storage=storage) as ctx:
        azure_storage = ctx.checkpoint._storage
        put, sent = azure_storage._put, list[str]()

        def cut_off_after_the_first_file(path: Path, key: str) -> None:
            if sent:
                raise ServiceRequestError("network down")
            put(path, key)
            sent.append(key)

        monkeypatch.setattr(azure_storage, "_put", cut_off_after_the_first_file)
        with pytest.raises(DetError) as raised:
            store(ctx, {"a.bin": b"first", "b.bin": b"second"})
    assert len(sent) == 1
    assert str(raised.value).startswith(f"checkpoint_storage: container '{container}' at http://127.0.0.1:")
    assert str(raised.value).endswith(": cannot connect: network down")
    assert blobs(connection_string, container) == {}
    assert fake_runtime.sent("POST", "/checkpoints") == []


def test_credentials_may_come_from_the_environment(
    container: str, connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string)
    with core.init(checkpoint_storage={"type": "azure", "container": container}) as ctx:
        storage_id = store(ctx, {"w.bin": b"1"})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "w.bin").read_bytes() == b"1"
    assert f"{storage_id}/w.bin" in blobs(connection_string, container)


def test_an_account_url_takes_an_account_key_as_credential(
    container: str, account_url: str, connection_string: str
) -> None:
    section = {"type": "azure", "container": container, "account_url": account_url, "credential": ACCOUNT_KEY}
    with core.init(checkpoint_storage=section) as ctx:
        storage_id = store(ctx, {"w.bin": b"1"})
    assert f"{storage_id}/w.bin" in blobs(connection_string, container)


def test_an_account_url_from_the_environment_takes_the_credential_beside_it(
    container: str, account_url: str, connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_URL", account_url)
    monkeypatch.setenv("AZURE_STORAGE_CREDENTIAL", ACCOUNT_KEY)
    with core.init(checkpoint_storage={"type": "azure", "container": container}) as ctx:
        storage_id = store(ctx, {"w.bin": b"1"})
    assert f"{storage_id}/w.bin" in blobs(connection_string, container)


def test_without_an_account_the_user_is_told_where_to_give_one(container: str) -> None:
    with core.init(checkpoint_storage={"type": "azure", "container": container}) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value) == (
        f"checkpoint_storage: container '{container}': no account given; set "
        "checkpoint_storage.connection_string or account_url, the AZURE_STORAGE_CONNECTION_STRING "
        "environment variable, or an Airflow connection (checkpoint_storage.wasb_conn_id)"
    )


def test_without_credentials_for_the_account_the_user_is_told_where_to_put_them(
    container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.identity import ChainedTokenCredential, EnvironmentCredential

    # DefaultAzureCredential as it ends on a machine with no identity, without probing for one.
    monkeypatch.setattr(
        "azure.identity.DefaultAzureCredential", lambda: ChainedTokenCredential(EnvironmentCredential())
    )
    account_url = "https://127.0.0.1:9/devstoreaccount1"  # a token is sought before any request is sent
    section = {"type": "azure", "container": container, "account_url": account_url}
    with core.init(checkpoint_storage=section) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    message = str(raised.value)
    assert message.startswith(
        f"checkpoint_storage: container '{container}' at {account_url}: no credentials found"
    )
    assert "connection_string" in message and "AZURE_STORAGE_CONNECTION_STRING" in message
    assert "wasb_conn_id" in message and "\n" not in message


def test_a_container_that_does_not_exist_is_named_with_its_endpoint(
    storage: dict[str, Any], account_url: str
) -> None:
    with core.init(checkpoint_storage={**storage, "container": "no-such-container"}) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value) == (
        f"checkpoint_storage: container 'no-such-container' at {account_url}: "
        "ContainerNotFound: The specified container does not exist."
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no azure traceback


def test_a_missing_checkpoint_names_where_it_was_looked_for(
    storage: dict[str, Any], container: str, account_url: str
) -> None:
    with core.init(checkpoint_storage=storage) as ctx, pytest.raises(DetError) as raised:
        with ctx.checkpoint.restore_path("nope"):
            pass
    host = account_url.removeprefix("http://")
    assert (
        str(raised.value) == f"checkpoint nope: its files are not at azure://{host}/{container}/team-a/nope/"
    )


def test_a_checkpoint_saved_under_another_prefix_is_found_through_its_record(
    storage: dict[str, Any], tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"old"})
    with core.init(checkpoint_storage={**storage, "prefix": "team-b"}) as ctx:
        ctx.checkpoint.download(storage_id, tmp_path / "copy")
    assert (tmp_path / "copy" / "w.bin").read_bytes() == b"old"


def test_a_record_keeps_the_credentials_only_on_the_same_account(
    storage: dict[str, Any], account_url: str
) -> None:
    like = AzureStorage.from_config(storage)
    described = like.describe("u1")
    same = AzureStorage.from_record({**described, "prefix": "ignored"}, "u1", like)
    other = AzureStorage.from_record(
        {**described, "account_url": "https://other.blob.core.windows.net"}, "u1", like
    )
    assert same is not None and same._connection_string == storage["connection_string"]
    assert other is not None and other._connection_string is None and other._credential is None
    assert other.location("u1") == f"azure://other.blob.core.windows.net/{storage['container']}/team-a/u1/"
    assert AzureStorage.from_record(described, "u2", like) is None


@pytest.mark.parametrize(
    "section, message",
    [
        ({"type": "azure"}, "checkpoint_storage.container: required for type azure"),
        (
            {"type": "azure", "container": "c", "connection_string": "x", "account_url": "https://a"},
            "checkpoint_storage.account_url: not with connection_string (it names the account)",
        ),
        (
            {"type": "azure", "container": "c", "account_url": "a.blob.core.windows.net"},
            "checkpoint_storage.account_url: expected an http:// or https:// URL, got 'a.blob.core.windows.net'",
        ),
        (
            {"type": "azure", "container": 7},
            "checkpoint_storage.container: expected a string, got 7",
        ),
    ],
)
def test_a_bad_azure_section_is_refused_at_init(section: dict[str, Any], message: str) -> None:
    with pytest.raises(DetError) as raised:
        core.init(checkpoint_storage=section)
    assert str(raised.value) == message


def test_a_malformed_connection_string_is_one_line(container: str) -> None:
    section = {"type": "azure", "container": container, "connection_string": "garbage"}
    with core.init(checkpoint_storage=section) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value) == (
        f"checkpoint_storage: container '{container}': Connection string is either blank or malformed."
    )


def test_without_azure_storage_blob_the_user_is_told_what_to_install(
    storage: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "azure.storage.blob", None)  # as if not installed
    with core.init(checkpoint_storage=storage) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value) == (
        "checkpoint_storage type azure needs azure-storage-blob: pip install 'det-airflow[azure]'"
    )


def test_the_files_of_a_checkpoint_are_listed_and_streamed_one_by_one(storage: dict[str, Any]) -> None:
    azure_storage = CheckpointStorage.from_config(storage)
    assert isinstance(azure_storage, AzureStorage)
    large = os.urandom(9 * 1024 * 1024)  # more than one chunk of the stream
    with azure_storage.writing("u1") as folder:
        (folder / "sub").mkdir()
        (folder / "sub" / "w.bin").write_bytes(b"12345")
        (folder / "large.bin").write_bytes(large)
    assert azure_storage.exists("u1") and not azure_storage.exists("u2")
    assert azure_storage.files("u1") == {"sub/w.bin": 5, "large.bin": len(large)}
    with azure_storage.open_file("u1", "sub/w.bin") as stream:
        assert stream.read(2) == b"12" and stream.read() == b"345"
    with azure_storage.open_file("u1", "large.bin") as stream:
        assert stream.read() == large
    with pytest.raises(DetError, match="no file 'none.bin' at azure://"):
        azure_storage.open_file("u1", "none.bin")
    for bad in ("../u2/w.bin", "/etc/passwd"):
        with pytest.raises(DetError, match="expected a relative path inside the checkpoint"):
            azure_storage.open_file("u1", bad)


def test_starting_the_core_api_does_not_import_azure(
    storage: dict[str, Any], python_env: dict[str, str], tmp_path: Path
) -> None:
    code = (
        "import sys; from det_airflow import core; "
        f"core.init(checkpoint_storage={storage!r}).close(); "
        "print(any(name == 'azure' or name.startswith('azure.') for name in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=python_env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
