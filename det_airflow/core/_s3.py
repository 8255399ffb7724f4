"""Checkpoints in an S3 bucket (AWS, or an S3-compatible store such as MinIO), through boto3.

What every object store does with a checkpoint is in ``_objects``; here are boto3's calls.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from det_airflow.core._objects import SECTION, ObjectStorage, causes, string_field
from det_airflow.core._storage import CheckpointStorage
from det_airflow.errors import DetError

DEFAULT_REGION = "us-east-1"
# Codes S3 answers for an object that is not there (GetObject, and HeadObject without a body).
_NO_OBJECT = ("NoSuchKey", "404", "NotFound")
# The section's fields read here; aws_conn_id names an Airflow connection, resolved outside the trial.
_FIELDS = ("bucket", "prefix", "endpoint_url", "access_key", "secret_key", "session_token", "region")


class S3Storage(ObjectStorage):
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
    scheme = "s3"

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
        super().__init__(bucket, prefix)
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
            raise DetError(f"{SECTION}: expected an s3 section, got {storage!r}")
        fields = {key: string_field(storage, key) for key in _FIELDS}
        if not fields["bucket"]:
            raise DetError(f"{SECTION}.bucket: required for type s3")
        for given, needed in (("access_key", "secret_key"), ("secret_key", "access_key")):
            if fields[given] and not fields[needed]:
                raise DetError(f"{SECTION}.{needed}: required with {given}")
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
        place = cls.placed(described, uuid)
        if place is None:
            return None
        bucket, prefix = place
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

    def describe(self, uuid: str) -> dict[str, str]:
        described = {"type": self.type, "bucket": self.bucket, "key": self.key(uuid)}
        if self.endpoint_url:
            described["endpoint_url"] = self.endpoint_url
        return described

    def exists(self, uuid: str) -> bool:
        with self.translated():
            answer = self._client.list_objects_v2(Bucket=self.bucket, Prefix=self.key(uuid), MaxKeys=1)
        return bool(answer.get("KeyCount"))

    def _list(self, prefix: str) -> Iterable[tuple[str, int]]:
        for page in self._pages(prefix):
            for obj in page.get("Contents", ()):
                yield obj["Key"], int(obj["Size"])

    def _pages(self, prefix: str) -> Iterator[dict[str, Any]]:
        paginator = self._client.get_paginator("list_objects_v2")
        yield from paginator.paginate(Bucket=self.bucket, Prefix=prefix)

    def _put(self, path: Path, key: str) -> None:
        self._client.upload_file(str(path), self.bucket, key)

    def _get(self, key: str, path: Path) -> None:
        self._client.download_file(self.bucket, key, str(path))

    def _open(self, key: str) -> IO[bytes] | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if _code(error) in _NO_OBJECT:
                return None
            raise
        body: IO[bytes] = answer["Body"]
        return body

    def _delete(self, uuid: str, keys: Iterable[str]) -> None:
        """Delete ``keys`` 1,000 (S3's most) a request."""
        listed = iter(keys)
        while batch := list(itertools.islice(listed, 1000)):
            answer = self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True}
            )
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise DetError(
                    f"checkpoint {uuid}: {len(answer['Errors'])} objects at {self.location(uuid)} "
                    f"could not be deleted, e.g. {first.get('Key')}: {first.get('Code')}"
                )

    def _describe_error(self, error: BaseException) -> str | None:
        return _describe_error(error)

    def _connect(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise DetError(
                f"{SECTION} type s3 needs boto3: pip install 'det-airflow[s3]' (or boto3)"
            ) from None
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

    def endpoint(self) -> str:
        endpoint = self.__dict__.get("_client")  # the client's, when built: it includes the env's
        if endpoint is not None:
            return str(endpoint.meta.endpoint_url)
        return self.endpoint_url or "AWS S3"


def _code(error: Any) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def _describe_error(error: BaseException) -> str | None:
    """What went wrong, for a boto3/botocore error (or one caused by it); None for other errors."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    for link in causes(error):
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
