"""Checkpoints in an S3 bucket (AWS, or an S3-compatible store such as MinIO), through boto3.

A checkpoint is the objects under ``<prefix>/<uuid>/``. It is written into a local folder first
and uploaded when complete; a failed upload deletes what it had sent, so no partial checkpoint
stays behind to be registered or restored.

boto3 is imported on first use: every trial imports the Core API at start, and only those that
checkpoint to S3 need it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from det_airflow.core._storage import (
    CheckpointFilesMissing,
    CheckpointStorage,
    checked_relative,
    resources_of,
)
from det_airflow.errors import DetError

DEFAULT_REGION = "us-east-1"
_SECTION = "checkpoint_storage"
# Codes S3 answers for an object that is not there (GetObject, and HeadObject without a body).
_NO_OBJECT = ("NoSuchKey", "404", "NotFound")
# The section's fields read here; aws_conn_id names an Airflow connection, resolved outside the trial.
_FIELDS = ("bucket", "prefix", "endpoint_url", "access_key", "secret_key", "session_token", "region")


class S3Storage(CheckpointStorage):
    """Checkpoints as objects under ``s3://<bucket>/<prefix>/<uuid>/``.

    Credentials come from ``access_key``/``secret_key`` when given, else from boto3's standard
    chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, a profile, an
    instance role). Without ``endpoint_url`` boto3 honours ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``.

    Example::

        storage = S3Storage("ckpts", prefix="team-a", endpoint_url="http://minio:9000")
        with storage.writing(uuid) as folder:
            (folder / "model.pt").write_bytes(data)
    """

    type = "s3"

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        region: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.region = region
        self._access_key = access_key
        self._secret_key = secret_key
        self._session_token = session_token

    @classmethod
    def from_config(cls, storage: Mapping[str, Any] | str | os.PathLike[str]) -> S3Storage:
        """From an ``s3`` section: ``bucket``, and optionally ``prefix``, ``endpoint_url``,
        ``access_key``/``secret_key`` (with ``session_token`` for temporary ones) and ``region``."""
        if not isinstance(storage, Mapping):
            raise DetError(f"{_SECTION}: expected an s3 section, got {storage!r}")
        fields = {key: _string(storage, key) for key in _FIELDS}
        if not fields["bucket"]:
            raise DetError(f"{_SECTION}.bucket: required for type s3")
        for given, needed in (("access_key", "secret_key"), ("secret_key", "access_key")):
            if fields[given] and not fields[needed]:
                raise DetError(f"{_SECTION}.{needed}: required with {given}")
        return cls(
            fields["bucket"],
            prefix=fields["prefix"] or "",
            endpoint_url=fields["endpoint_url"],
            access_key=fields["access_key"],
            secret_key=fields["secret_key"],
            session_token=fields["session_token"],
            region=fields["region"],
        )

    @classmethod
    def from_record(
        cls, described: Mapping[str, Any], uuid: str, like: CheckpointStorage | None = None
    ) -> S3Storage | None:
        """The storage a registered checkpoint's record names (see ``describe``), with ``like``'s
        credentials when ``like`` is the same store; None when the record is no s3 record of ``uuid``."""
        bucket, key = described.get("bucket"), described.get("key")
        if not isinstance(bucket, str) or not bucket or not isinstance(key, str):
            return None
        prefix, _, name = key.rstrip("/").rpartition("/")
        if name != uuid:
            return None
        endpoint_url = described.get("endpoint_url") or None
        if isinstance(like, S3Storage):
            return like.moved(bucket, prefix, endpoint_url)
        return cls(bucket, prefix=prefix, endpoint_url=endpoint_url)

    def moved(self, bucket: str, prefix: str, endpoint_url: str | None) -> S3Storage:
        """The same credentials at another bucket or prefix; another endpoint gets none of them."""
        same_store = endpoint_url == self.endpoint_url
        return S3Storage(
            bucket,
            prefix=prefix,
            endpoint_url=endpoint_url,
            access_key=self._access_key if same_store else None,
            secret_key=self._secret_key if same_store else None,
            session_token=self._session_token if same_store else None,
            region=self.region,
        )

    def key(self, uuid: str) -> str:
        """The key prefix of checkpoint ``uuid``'s objects, ending in ``/``."""
        return f"{self.prefix}/{uuid}/" if self.prefix else f"{uuid}/"

    def describe(self, uuid: str) -> dict[str, str]:
        described = {"type": self.type, "bucket": self.bucket, "key": self.key(uuid)}
        if self.endpoint_url:
            described["endpoint_url"] = self.endpoint_url
        return described

    def location(self, uuid: str) -> str:
        return f"s3://{self.bucket}/{self.key(uuid)}"

    @contextlib.contextmanager
    def writing(self, uuid: str) -> Iterator[Path]:
        """A local temporary folder, uploaded when the block succeeds and removed in any case."""
        if self.exists(uuid):
            raise DetError(f"checkpoint {uuid} already exists at {self.location(uuid)}")
        with _temporary_folder(uuid) as folder:
            yield folder
            self._upload(uuid, folder)

    @contextlib.contextmanager
    def local_path(self, uuid: str) -> Iterator[Path]:
        """The checkpoint downloaded into a temporary folder, removed when the block ends."""
        with _temporary_folder(uuid) as folder:
            self.download(uuid, folder)
            yield folder

    def download(self, uuid: str, dest: Path) -> None:
        files = self.files(uuid)
        if not files:
            raise self.missing(uuid)
        with self._translated():
            for relative in files:
                target = Path(dest) / checked_relative(relative)
                target.parent.mkdir(parents=True, exist_ok=True)
                self._client.download_file(self.bucket, self.key(uuid) + relative, str(target))

    def delete(self, uuid: str) -> None:
        """Delete every object under the checkpoint's key, a page (at most 1,000) at a time."""
        with self._translated():
            for page in self._pages(uuid):
                objects = [{"Key": obj["Key"]} for obj in page.get("Contents", ())]
                if not objects:
                    continue
                answer = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )
                if answer.get("Errors"):
                    first = answer["Errors"][0]
                    raise DetError(
                        f"checkpoint {uuid}: {len(answer['Errors'])} objects at {self.location(uuid)} "
                        f"could not be deleted, e.g. {first.get('Key')}: {first.get('Code')}"
                    )

    def exists(self, uuid: str) -> bool:
        with self._translated():
            answer = self._client.list_objects_v2(Bucket=self.bucket, Prefix=self.key(uuid), MaxKeys=1)
        return bool(answer.get("KeyCount"))

    def files(self, uuid: str) -> dict[str, int]:
        key = self.key(uuid)
        found: dict[str, int] = {}
        with self._translated():
            for page in self._pages(uuid):
                for obj in page.get("Contents", ()):
                    relative = obj["Key"][len(key) :]
                    if relative and not relative.endswith("/"):  # folder markers hold no data
                        found[relative] = int(obj["Size"])
        return found

    def open_file(self, uuid: str, relative: str) -> IO[bytes]:
        """The object's body, streamed as it is read; close it when done."""
        key = self.key(uuid) + checked_relative(relative).as_posix()
        client = self._client
        from botocore.exceptions import ClientError

        with self._translated():
            try:
                answer = client.get_object(Bucket=self.bucket, Key=key)
            except ClientError as error:
                if _code(error) in _NO_OBJECT:
                    raise CheckpointFilesMissing(
                        f"checkpoint {uuid}: no file {relative!r} at {self.location(uuid)}"
                    ) from None
                raise
        body: IO[bytes] = answer["Body"]
        return body

    def _upload(self, uuid: str, folder: Path) -> None:
        key = self.key(uuid)
        try:
            with self._translated():
                for relative in resources_of(folder):
                    self._client.upload_file(str(folder / relative), self.bucket, key + relative)
        except BaseException:
            # What was sent so far is no checkpoint; a failure to clean it up must not hide why.
            with contextlib.suppress(Exception):
                self.delete(uuid)
            raise

    def _pages(self, uuid: str) -> Iterator[dict[str, Any]]:
        paginator = self._client.get_paginator("list_objects_v2")
        yield from paginator.paginate(Bucket=self.bucket, Prefix=self.key(uuid))

    @functools.cached_property
    def _client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise DetError(
                f"{_SECTION} type s3 needs boto3: pip install 'det-airflow[s3]' (or boto3)"
            ) from None
        with self._translated():
            session = boto3.session.Session(
                aws_access_key_id=self._access_key,
                aws_secret_access_key=self._secret_key,
                aws_session_token=self._session_token,
                region_name=self.region,
            )
            # S3-compatible stores are reached by path (http://host/bucket/key): their host names
            # rarely resolve with the bucket in front, as AWS's do.
            config = Config(s3={"addressing_style": "path"}) if self.endpoint_url else None
            return session.client(
                "s3",
                region_name=session.region_name or DEFAULT_REGION,
                endpoint_url=self.endpoint_url,
                config=config,
            )

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """boto3's errors as one line for the user, naming the bucket and the endpoint."""
        try:
            yield
        except DetError:
            raise
        except Exception as error:
            message = _describe_error(error)
            if message is None:
                raise
            raise DetError(f"{_SECTION}: bucket {self.bucket!r} at {self._endpoint()}: {message}") from None

    def _endpoint(self) -> str:
        endpoint = self.__dict__.get("_client")  # the client's, when built: it includes the env's
        if endpoint is not None:
            return str(endpoint.meta.endpoint_url)
        return self.endpoint_url or "AWS S3"


def _string(storage: Mapping[str, Any], key: str) -> str | None:
    value = storage.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DetError(f"{_SECTION}.{key}: expected a string, got {value!r}")
    return value


def _code(error: Any) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def _describe_error(error: BaseException) -> str | None:
    """What went wrong, for a boto3/botocore error (or one caused by it); None for other errors."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for link in chain:
        if isinstance(link, NoCredentialsError | PartialCredentialsError):
            return (
                "no credentials found; set checkpoint_storage.access_key and secret_key, the "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY environment variables, "
                "or an Airflow connection (checkpoint_storage.aws_conn_id)"
            )
        if isinstance(link, ClientError):
            code = _code(link)
            text = str(getattr(link, "response", {}).get("Error", {}).get("Message") or "")
            return f"{code}: {text}" if text and text != code else code or str(link)
    module = type(error).__module__
    if module.startswith(("botocore", "boto3", "s3transfer")):
        return str(error)
    return None


@contextlib.contextmanager
def _temporary_folder(uuid: str) -> Iterator[Path]:
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=f"det-checkpoint-{uuid}-"))  # mode 0700
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
