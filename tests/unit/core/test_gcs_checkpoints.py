"""Checkpoints in a Google Cloud Storage bucket through the Core API, against fake-gcs-server.

A checkpoint is the objects under ``<prefix>/<uuid>/``; they appear only once the whole checkpoint
is written, a failure leaves none, and every mistake a user can make is one line naming the bucket.
On a trial, a gcs section (which carries no credentials) is reached through the master instead:
test_through_master_checkpoints.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from det_airflow import core
from det_airflow.core import CheckpointStorage
from det_airflow.core._gcs import CREDENTIALS_VARIABLE, GCSStorage
from det_airflow.core._local import read_jsonl
from det_airflow.errors import DetError
from tests.gcs_server import gcs_client, gcs_server
from tests.http_stub import serve

SERVICE_ACCOUNT = "trainer@project-a.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """The URL of a Google Cloud Storage emulator."""
    with gcs_server() as url:
        yield url


@pytest.fixture(autouse=True)
def no_google_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the machine's Google setup (variables, gcloud's folder, a metadata server)
    reaches a test."""
    from google.auth.compute_engine import _metadata

    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_")):
            monkeypatch.delenv(name)
    for name in ("STORAGE_EMULATOR_HOST", "API_ENDPOINT_OVERRIDE", CREDENTIALS_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # google.auth reads the variable at import


@pytest.fixture
def gcs(endpoint: str) -> Any:
    """A google-cloud-storage client of the emulator, to look at the bucket as a user would."""
    return gcs_client(endpoint)


@pytest.fixture
def bucket(gcs: Any) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    gcs.create_bucket(name)
    return name


@pytest.fixture
def storage(endpoint: str, bucket: str) -> dict[str, Any]:
    """An experiment's ``checkpoint_storage`` section for the bucket (the emulator needs no credentials)."""
    return {"type": "gcs", "bucket": bucket, "prefix": "team-a", "endpoint_url": endpoint}


class TokenServer(BaseHTTPRequestHandler):
    """Google's OAuth token endpoint, standing in: it grants every JWT (or refuses each when
    ``refuse`` is set) and keeps the assertions it was sent."""

    assertions: ClassVar[list[dict[str, Any]]] = []
    refuse: ClassVar[bool] = False

    def do_POST(self) -> None:
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        payload = form["assertion"][0].split(".")[1]
        self.assertions.append(json.loads(_unpadded_b64decode(payload)))
        status, body = (
            (400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
            if self.refuse
            else (200, {"access_token": "granted", "expires_in": 3600, "token_type": "Bearer"})
        )
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _unpadded_b64decode(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture(scope="module")
def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture
def token_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The token endpoint's URL; ``TokenServer.assertions`` starts empty."""
    monkeypatch.setattr(TokenServer, "assertions", [])
    monkeypatch.setattr(TokenServer, "refuse", False)
    with serve(TokenServer) as url:
        yield f"{url}/token"


@pytest.fixture
def key(private_key: str, token_server: str) -> dict[str, str]:
    """A service account key whose tokens come from ``token_server``."""
    return {
        "type": "service_account",
        "project_id": "project-a",
        "private_key_id": "k1",
        "private_key": private_key,
        "client_email": SERVICE_ACCOUNT,
        "client_id": "1",
        "token_uri": token_server,
    }


def objects(gcs: Any, bucket: str) -> dict[str, bytes]:
    return {blob.name: blob.download_as_bytes() for blob in gcs.list_blobs(bucket)}


def store(ctx: core.Context, files: dict[str, bytes], steps: int = 1) -> str:
    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
        for name, data in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
    return storage_id


def test_a_stored_checkpoint_is_restored_byte_for_byte(
    storage: dict[str, Any], gcs: Any, bucket: str
) -> None:
    weights = os.urandom(9 * 1024 * 1024)  # past google-cloud-storage's 8 MiB: a resumable upload
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"model.pt": weights, "optim/state.pt": b"adam"})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "model.pt").read_bytes() == weights
            assert (path / "optim" / "state.pt").read_bytes() == b"adam"
        assert not path.exists()  # the downloaded copy is gone with the block
    stored = objects(gcs, bucket)
    assert sorted(stored) == [
        f"team-a/{storage_id}/{n}" for n in ("metadata.json", "model.pt", "optim/state.pt")
    ]
    assert stored[f"team-a/{storage_id}/model.pt"] == weights


def test_nothing_is_in_the_bucket_until_the_block_ends(
    storage: dict[str, Any], gcs: Any, bucket: str
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "w.bin").write_bytes(b"1234")
            assert objects(gcs, bucket) == {}
        assert not path.exists()  # the local folder written into is removed once uploaded
    assert len(objects(gcs, bucket)) == 2


def test_the_checkpoint_is_registered_with_where_it_lives_and_no_credentials(
    storage: dict[str, Any], endpoint: str, bucket: str, tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"1234"})
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["storage"] == {
        "type": "gcs",
        "bucket": bucket,
        "key": f"team-a/{storage_id}/",
        "endpoint_url": endpoint,
    }
    assert record["resources"]["w.bin"] == 4


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


def test_delete_removes_every_object_of_the_checkpoint_and_no_other(
    storage: dict[str, Any], gcs: Any, bucket: str, tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        kept = store(ctx, {"w.bin": b"kept"})
        gone = store(ctx, {f"shard-{i}.bin": b"x" for i in range(5)} | {"sub/w.bin": b"y"})
        ctx.checkpoint.delete(gone)
    assert sorted(objects(gcs, bucket)) == [f"team-a/{kept}/metadata.json", f"team-a/{kept}/w.bin"]
    deleted = [r for r in read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl") if r["uuid"] == gone]
    assert deleted[-1]["state"] == "DELETED"


def test_delete_goes_past_one_page_of_objects(
    storage: dict[str, Any], gcs: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        gcs.bucket(bucket).blob(f"team-a/many/{i}.bin").upload_from_string(b"")
    gcs_storage = GCSStorage.from_config(storage)
    client = gcs_storage._client
    list_blobs = client.list_blobs

    def two_a_page(*args: Any, **kwargs: Any) -> Any:
        return list_blobs(*args, **kwargs, page_size=2)  # a page holds up to 1,000 objects; these 2

    monkeypatch.setattr(client, "list_blobs", two_a_page)
    gcs_storage.delete("many")
    gcs_storage.delete("many")  # nothing left to delete is no error
    assert objects(gcs, bucket) == {}


def test_credentials_may_come_from_the_trials_variable(
    storage: dict[str, Any], key: dict[str, str], monkeypatch: pytest.MonkeyPatch, gcs: Any, bucket: str
) -> None:
    monkeypatch.setenv(CREDENTIALS_VARIABLE, json.dumps(key))
    with core.init(checkpoint_storage=storage) as ctx:
        store(ctx, {"w.bin": b"1"})
    assert len(objects(gcs, bucket)) == 2
    assert {a["iss"] for a in TokenServer.assertions} == {SERVICE_ACCOUNT}


def test_credentials_given_by_the_master_come_first_and_stay_with_their_store(
    endpoint: str, bucket: str, key: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CREDENTIALS_VARIABLE, "not read")
    section = {"type": "gcs", "bucket": bucket, "prefix": "team-a", "endpoint_url": endpoint}
    gcs_storage = CheckpointStorage.from_config({**section, "credentials_info": key})
    assert isinstance(gcs_storage, GCSStorage)
    with gcs_storage.writing("u1") as folder:
        (folder / "w.bin").write_bytes(b"1")
    assert {a["iss"] for a in TokenServer.assertions} == {SERVICE_ACCOUNT}
    described = gcs_storage.describe("u1")
    assert described == {"type": "gcs", "bucket": bucket, "key": "team-a/u1/", "endpoint_url": endpoint}
    same = CheckpointStorage.from_record(described, "u1", like=gcs_storage)
    elsewhere = CheckpointStorage.from_record(
        {**described, "endpoint_url": "http://other"}, "u1", gcs_storage
    )
    assert isinstance(same, GCSStorage) and same._credentials_info == key
    assert isinstance(elsewhere, GCSStorage) and elsewhere._credentials_info is None


@pytest.mark.parametrize(
    "value, message",
    [
        ("{'private_key': 'secret-1'", "expected a service account key's JSON; it is not a JSON object"),
        ('["secret-1"]', "expected a service account key's JSON; it is not a JSON object"),
        (
            '{"type": "authorized_user", "refresh_token": "secret-1"}',
            "expected a service account key (type service_account), got type 'authorized_user'",
        ),
        ('{"type": "service_account", "private_key": "secret-1"}', "missing fields"),
        (
            '{"type": "service_account", "private_key": "secret-1", "client_email": "a@b", "token_uri": "x"}',
            "its private_key could not be read",
        ),
    ],
)
def test_a_bad_key_in_the_trials_variable_is_named_and_not_shown(
    storage: dict[str, Any], value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CREDENTIALS_VARIABLE, value)
    with core.init(checkpoint_storage=storage) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value).startswith(f"{CREDENTIALS_VARIABLE}: ")
    assert message in str(raised.value) and "secret-1" not in str(raised.value)


def test_a_key_the_token_server_refuses_is_one_line(
    storage: dict[str, Any], endpoint: str, bucket: str, key: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TokenServer, "refuse", True)
    monkeypatch.setenv(CREDENTIALS_VARIABLE, json.dumps(key))
    with core.init(checkpoint_storage=storage) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value) == (
        f"checkpoint_storage: bucket '{bucket}' at {endpoint}: RefreshError: invalid_grant: Invalid JWT Signature."
    )


def test_the_endpoint_may_come_from_the_environment(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, gcs: Any, bucket: str
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    with core.init(checkpoint_storage={"type": "gcs", "bucket": bucket}) as ctx:
        storage_id = store(ctx, {"w.bin": b"1"})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "w.bin").read_bytes() == b"1"
    assert f"{storage_id}/w.bin" in objects(gcs, bucket)


def test_without_credentials_the_user_is_told_where_to_put_them() -> None:
    with core.init(checkpoint_storage={"type": "gcs", "bucket": "b"}) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value) == (
        "checkpoint_storage: bucket 'b' at https://storage.googleapis.com: no credentials found; "
        "set GOOGLE_APPLICATION_CREDENTIALS, or an Airflow connection (checkpoint_storage.gcp_conn_id)"
    )


def test_a_key_file_that_cannot_be_read_is_named(
    storage: dict[str, Any], endpoint: str, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with core.init(checkpoint_storage=storage) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value).startswith(
        f"checkpoint_storage: bucket '{bucket}' at {endpoint}: GOOGLE_APPLICATION_CREDENTIALS: "
    )
    assert "missing.json" in str(raised.value)


def test_a_bucket_that_does_not_exist_is_named_with_its_endpoint(
    storage: dict[str, Any], endpoint: str
) -> None:
    with core.init(checkpoint_storage={**storage, "bucket": "no-such-bucket"}) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value).startswith(
        f"checkpoint_storage: bucket 'no-such-bucket' at {endpoint}: NotFound"
    )
    assert "\n" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no google traceback


def test_a_missing_checkpoint_names_where_it_was_looked_for(storage: dict[str, Any], bucket: str) -> None:
    with core.init(checkpoint_storage=storage) as ctx, pytest.raises(DetError) as raised:
        with ctx.checkpoint.restore_path("nope"):
            pass
    assert str(raised.value) == f"checkpoint nope: its files are not at gs://{bucket}/team-a/nope/"


def test_a_checkpoint_saved_under_another_prefix_is_found_through_its_record(
    storage: dict[str, Any], tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"old"})
    with core.init(checkpoint_storage={**storage, "prefix": "team-b"}) as ctx:
        ctx.checkpoint.download(storage_id, tmp_path / "copy")
    assert (tmp_path / "copy" / "w.bin").read_bytes() == b"old"


@pytest.mark.parametrize(
    "section, message",
    [
        ({"type": "gcs"}, "checkpoint_storage.bucket: required for type gcs"),
        (
            {"type": "gcs", "bucket": "b", "endpoint_url": 4443},
            "checkpoint_storage.endpoint_url: expected a string, got 4443",
        ),
        (
            {"type": "gcs", "bucket": "b", "project": 7},
            "checkpoint_storage.project: expected a string, got 7",
        ),
        (
            {"type": "gcs", "bucket": "b", "credentials_info": "secret-1"},
            "checkpoint_storage.credentials_info: expected a service account key (a JSON object)",
        ),
    ],
)
def test_a_bad_gcs_section_is_refused_at_init(section: dict[str, Any], message: str) -> None:
    with pytest.raises(DetError) as raised:
        core.init(checkpoint_storage=section)
    assert str(raised.value) == message


def test_the_files_of_a_checkpoint_are_listed_and_streamed_one_by_one(storage: dict[str, Any]) -> None:
    gcs_storage = CheckpointStorage.from_config(storage)
    assert isinstance(gcs_storage, GCSStorage)
    with gcs_storage.writing("u1") as folder:
        (folder / "sub").mkdir()
        (folder / "sub" / "w.bin").write_bytes(b"12345")
    assert gcs_storage.exists("u1") and not gcs_storage.exists("u2")
    assert gcs_storage.files("u1") == {"sub/w.bin": 5}
    with gcs_storage.open_file("u1", "sub/w.bin") as stream:
        assert stream.read(2) == b"12" and stream.read() == b"345"
    with pytest.raises(DetError, match="checkpoint u1: no file 'w.bin' at gs://"):
        gcs_storage.open_file("u1", "w.bin")
    for bad in ("../u2/w.bin", "/etc/passwd"):
        with pytest.raises(DetError, match="expected a relative path inside the checkpoint"):
            gcs_storage.open_file("u1", bad)


def test_starting_the_core_api_does_not_import_google_cloud(
    storage: dict[str, Any], python_env: dict[str, str], tmp_path: Path
) -> None:
    # Modules loaded before the code runs are left out: with Google's packages installed, their
    # .pth files load the bare `google.cloud` namespace at every interpreter start.
    code = (
        "import sys; before = set(sys.modules); from det_airflow import core; "
        f"core.init(checkpoint_storage={storage!r}).close(); "
        "print(any(m.startswith(('google.cloud', 'google.auth')) for m in set(sys.modules) - before))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=python_env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


def test_the_server_leaves_no_emulator_variable_behind() -> None:
    with gcs_server("b1") as url:
        assert [b.name for b in gcs_client(url).list_buckets()] == ["b1"]
    assert "STORAGE_EMULATOR_HOST" not in os.environ
