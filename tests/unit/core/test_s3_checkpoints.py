"""Checkpoints in an S3 bucket through the Core API, against moto's standalone S3 server.

A checkpoint is the objects under ``<prefix>/<uuid>/``; they appear only once the whole checkpoint
is written, a failure leaves none, and every mistake a user can make is one line naming the bucket.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from det_airflow import core
from det_airflow.core import CheckpointStorage
from det_airflow.core._local import read_jsonl
from det_airflow.core._s3 import S3Storage
from det_airflow.errors import DetError
from tests.s3_server import s3_server, without_aws_credentials

from .conftest import FakeRuntime

KEYS = {"access_key": "testing-key", "secret_key": "testing-secret"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """The URL of an S3-compatible server running in this process."""
    with s3_server() as url:
        yield url


@pytest.fixture(autouse=True)
def no_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the machine's AWS setup (variables, ~/.aws, an instance role) reaches a test."""
    without_aws_credentials(monkeypatch, tmp_path)


@pytest.fixture
def s3(endpoint: str) -> Any:
    """A boto3 client of the server, to look at the bucket as a user would."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEYS["access_key"],
        aws_secret_access_key=KEYS["secret_key"],
    )


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def storage(endpoint: str, bucket: str) -> dict[str, Any]:
    """An experiment's ``checkpoint_storage`` section for the bucket, credentials included."""
    return {"type": "s3", "bucket": bucket, "prefix": "team-a", "endpoint_url": endpoint, **KEYS}


def objects(s3: Any, bucket: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def store(ctx: core.Context, files: dict[str, bytes], steps: int = 1) -> str:
    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
        for name, data in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
    return storage_id


def test_a_stored_checkpoint_is_restored_byte_for_byte(storage: dict[str, Any], s3: Any, bucket: str) -> None:
    weights = os.urandom(3 * 1024 * 1024)  # past boto3's multipart threshold
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"model.pt": weights, "optim/state.pt": b"adam"})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "model.pt").read_bytes() == weights
            assert (path / "optim" / "state.pt").read_bytes() == b"adam"
        assert not path.exists()  # the downloaded copy is gone with the block
    stored = objects(s3, bucket)
    assert sorted(stored) == [
        f"team-a/{storage_id}/{n}" for n in ("metadata.json", "model.pt", "optim/state.pt")
    ]
    assert stored[f"team-a/{storage_id}/model.pt"] == weights


def test_nothing_is_in_the_bucket_until_the_block_ends(storage: dict[str, Any], s3: Any, bucket: str) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "w.bin").write_bytes(b"1234")
            assert objects(s3, bucket) == {}
        assert not path.exists()  # the local folder written into is removed once uploaded
    assert len(objects(s3, bucket)) == 2


def test_the_checkpoint_is_registered_with_where_it_lives_and_no_credentials(
    storage: dict[str, Any], endpoint: str, bucket: str, tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"1234"})
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["storage"] == {
        "type": "s3",
        "bucket": bucket,
        "key": f"team-a/{storage_id}/",
        "endpoint_url": endpoint,
    }
    assert record["resources"]["w.bin"] == 4


def test_on_a_trial_the_master_hears_of_the_checkpoint_after_its_upload(
    remote_init: Callable, fake_runtime: FakeRuntime, storage: dict[str, Any], s3: Any, bucket: str
) -> None:
    with remote_init(checkpoint_storage=storage) as ctx:
        storage_id = store(ctx, {"w.bin": b"1234"}, steps=10)
    [registered] = fake_runtime.sent("POST", "/checkpoints")
    assert registered.body["uuid"] == storage_id and registered.body["steps_completed"] == 10
    assert set(registered.body["resources"]) == {"w.bin", "metadata.json"}
    assert set(objects(s3, bucket)) == {f"team-a/{storage_id}/w.bin", f"team-a/{storage_id}/metadata.json"}


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


def test_metadata_comes_from_the_bucket_when_the_master_has_no_record(
    remote_init: Callable, fake_runtime: FakeRuntime, storage: dict[str, Any]
) -> None:
    with remote_init(checkpoint_storage=storage) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 3, "framework": "torch"}) as (_, storage_id):
            pass
        fake_runtime.checkpoints.clear()
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 3, "framework": "torch"}


def test_delete_removes_every_object_of_the_checkpoint_and_no_other(
    storage: dict[str, Any], s3: Any, bucket: str, tmp_path: Path
) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        kept = store(ctx, {"w.bin": b"kept"})
        gone = store(ctx, {f"shard-{i}.bin": b"x" for i in range(5)} | {"sub/w.bin": b"y"})
        ctx.checkpoint.delete(gone)
    assert sorted(objects(s3, bucket)) == [f"team-a/{kept}/metadata.json", f"team-a/{kept}/w.bin"]
    deleted = [r for r in read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl") if r["uuid"] == gone]
    assert deleted[-1]["state"] == "DELETED"


def test_delete_goes_past_one_page_of_objects(storage: dict[str, Any], s3: Any, bucket: str) -> None:
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"team-a/many/{i}.bin", Body=b"")
    s3_storage = S3Storage.from_config(storage)

    def two_keys_a_page(params: dict[str, Any], **kwargs: Any) -> None:
        params["MaxKeys"] = 2  # S3's pages hold up to 1,000 keys; these hold 2

    s3_storage._client.meta.events.register("before-parameter-build.s3.ListObjectsV2", two_keys_a_page)
    s3_storage.delete("many")
    assert objects(s3, bucket) == {}


def test_a_failure_inside_the_block_uploads_and_registers_nothing(
    remote_init: Callable, fake_runtime: FakeRuntime, storage: dict[str, Any], s3: Any, bucket: str
) -> None:
    with remote_init(checkpoint_storage=storage) as ctx, pytest.raises(OSError, match="disk full"):
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "half.pt").write_bytes(b"x")
            raise OSError("disk full")
    assert not path.exists()
    assert objects(s3, bucket) == {}
    assert fake_runtime.sent("POST", "/checkpoints") == []


def test_an_upload_failing_midway_takes_back_what_it_sent(
    remote_init: Callable, fake_runtime: FakeRuntime, storage: dict[str, Any], s3: Any, bucket: str
) -> None:
    def cut_off_after_the_first_file(**kwargs: Any) -> None:
        if objects(s3, bucket):
            raise ConnectionError("network down")

    with remote_init(checkpoint_storage=storage) as ctx:
        client = ctx.checkpoint._storage._client
        client.meta.events.register("before-call.s3.PutObject", cut_off_after_the_first_file)
        with pytest.raises(ConnectionError, match="network down"):
            store(ctx, {"a.bin": b"first", "b.bin": b"second"})
    assert objects(s3, bucket) == {}
    assert fake_runtime.sent("POST", "/checkpoints") == []


def test_credentials_may_come_from_the_config(storage: dict[str, Any], s3: Any, bucket: str) -> None:
    with core.init(checkpoint_storage=storage) as ctx:
        store(ctx, {"w.bin": b"1"})
    assert len(objects(s3, bucket)) == 2


def test_credentials_and_endpoint_may_come_from_the_environment(
    storage: dict[str, Any], endpoint: str, monkeypatch: pytest.MonkeyPatch, s3: Any, bucket: str
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS["secret_key"])
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    with core.init(checkpoint_storage={"type": "s3", "bucket": bucket}) as ctx:
        storage_id = store(ctx, {"w.bin": b"1"})
        with ctx.checkpoint.restore_path(storage_id) as path:
            assert (path / "w.bin").read_bytes() == b"1"
    assert f"{storage_id}/w.bin" in objects(s3, bucket)


def test_without_credentials_the_user_is_told_where_to_put_them(endpoint: str, bucket: str) -> None:
    with core.init(checkpoint_storage={"type": "s3", "bucket": bucket, "endpoint_url": endpoint}) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    message = str(raised.value)
    assert message.startswith(f"checkpoint_storage: bucket '{bucket}' at {endpoint}: no credentials found")
    assert "access_key" in message and "AWS_ACCESS_KEY_ID" in message and "aws_conn_id" in message


def test_a_bucket_that_does_not_exist_is_named_with_its_endpoint(
    storage: dict[str, Any], endpoint: str
) -> None:
    with core.init(checkpoint_storage={**storage, "bucket": "no-such-bucket"}) as ctx:
        with pytest.raises(DetError) as raised, ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert str(raised.value).startswith(
        f"checkpoint_storage: bucket 'no-such-bucket' at {endpoint}: NoSuchBucket"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no botocore traceback


def test_a_missing_checkpoint_names_where_it_was_looked_for(storage: dict[str, Any], bucket: str) -> None:
    with core.init(checkpoint_storage=storage) as ctx, pytest.raises(DetError) as raised:
        with ctx.checkpoint.restore_path("nope"):
            pass
    assert str(raised.value) == f"checkpoint nope: its files are not at s3://{bucket}/team-a/nope/"


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
        ({"type": "s3"}, "checkpoint_storage.bucket: required for type s3"),
        (
            {"type": "s3", "bucket": "b", "access_key": "k"},
            "checkpoint_storage.secret_key: required with access_key",
        ),
        (
            {"type": "s3", "bucket": "b", "endpoint_url": 9000},
            "checkpoint_storage.endpoint_url: expected a string, got 9000",
        ),
    ],
)
def test_a_bad_s3_section_is_refused_at_init(section: dict[str, Any], message: str) -> None:
    with pytest.raises(DetError) as raised:
        core.init(checkpoint_storage=section)
    assert str(raised.value) == message


def test_the_files_of_a_checkpoint_are_listed_and_streamed_one_by_one(storage: dict[str, Any]) -> None:
    s3_storage = CheckpointStorage.from_config(storage)
    assert isinstance(s3_storage, S3Storage)
    with s3_storage.writing("u1") as folder:
        (folder / "sub").mkdir()
        (folder / "sub" / "w.bin").write_bytes(b"12345")
    assert s3_storage.exists("u1") and not s3_storage.exists("u2")
    assert s3_storage.files("u1") == {"sub/w.bin": 5}
    with s3_storage.open_file("u1", "sub/w.bin") as stream:
        assert stream.read() == b"12345"
    for bad in ("../u2/w.bin", "/etc/passwd"):
        with pytest.raises(DetError, match="expected a relative path inside the checkpoint"):
            s3_storage.open_file("u1", bad)


def test_starting_the_core_api_does_not_import_boto3(
    storage: dict[str, Any], python_env: dict[str, str], tmp_path: Path
) -> None:
    code = (
        "import sys; from det_airflow import core; "
        f"core.init(checkpoint_storage={storage!r}).close(); print('boto3' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=python_env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
