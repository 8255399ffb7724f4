"""Checkpoints in an Azure Blob Storage container, through azure-storage-blob.

What every object store does with a checkpoint is in ``_objects``; here are azure-storage-blob's calls.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from det_airflow.core._objects import SECTION, ObjectStorage, causes, string_field
from det_airflow.core._storage import CheckpointStorage
from det_airflow.errors import DetError

# The variables an account and its credentials are read from off a trial (a user's own machine, or
# a trial's own environment_variables); the platform's connection never reaches a trial.
CONNECTION_STRING_VARIABLE = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_URL_VARIABLE = "AZURE_STORAGE_ACCOUNT_URL"
CREDENTIAL_VARIABLE = "AZURE_STORAGE_CREDENTIAL"
# A file over this size goes up and comes down in requests of this size: a failed request then
# resends one block, not the whole file (the library sends up to 64 MiB in one request).
_BLOCK = 4 * 1024 * 1024
# Blocks sent or fetched side by side for one large file, as boto3 does with an S3 object's parts.
_CONCURRENCY = 4
# Deletes in one batch request: Azure's most.
_BATCH = 256
# The answers of a batch's delete that leave the blob gone: deleted, or not there to begin with.
_GONE = (202, 404)
# The section's fields read here; wasb_conn_id names an Airflow connection, resolved outside the trial.
_FIELDS = ("container", "prefix", "connection_string", "account_url", "credential")


class AzureStorage(ObjectStorage):
    """Checkpoints as blobs under ``<prefix>/<uuid>/`` in a container, located for people as
    ``azure://<account host>/<container>/<prefix>/<uuid>/`` (the account host being the account
    URL without its scheme, e.g. ``myaccount.blob.core.windows.net``).

    The account and its credentials come from, in this order: ``connection_string``;
    ``account_url`` with ``credential`` (an account key or a SAS token); the
    ``AZURE_STORAGE_CONNECTION_STRING`` variable, when it names ``account_url``'s account or none
    is given; ``account_url`` (else ``AZURE_STORAGE_ACCOUNT_URL``) with ``AZURE_STORAGE_CREDENTIAL``,
    else with azure-identity's ``DefaultAzureCredential`` (a managed identity, ``az login``, ...)
    when it is installed.

    Example::

        storage = AzureStorage("ckpts", prefix="team-a", connection_string=connection_string)
        with storage.writing(uuid) as folder:
            (folder / "model.pt").write_bytes(data)
    """

    type = "azure"
    scheme = "azure"
    noun = "container"

    def __init__(
        self,
        container: str,
        *,
        prefix: str = "",
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: str | None = None,
    ) -> None:
        super().__init__(container, prefix)
        self.account_url = account_url
        self._connection_string = connection_string
        self._credential = credential

    @classmethod
    def from_config(cls, storage: Mapping[str, Any] | str | os.PathLike[str]) -> AzureStorage:
        """From an ``azure`` section: ``container``, and optionally ``prefix`` and the account:
        ``connection_string``, or ``account_url`` with ``credential``."""
        if not isinstance(storage, Mapping):
            raise DetError(f"{SECTION}: expected an azure section, got {storage!r}")
        fields = {key: string_field(storage, key) for key in _FIELDS}
        if not fields["container"]:
            raise DetError(f"{SECTION}.container: required for type azure")
        account_url = fields["account_url"]
        if account_url and fields["connection_string"]:
            raise DetError(f"{SECTION}.account_url: not with connection_string (it names the account)")
        if account_url and not account_url.startswith(("http://", "https://")):
            raise DetError(f"{SECTION}.account_url: expected an http:// or https:// URL, got {account_url!r}")
        return cls(
            fields["container"],
            prefix=fields["prefix"] or "",
            connection_string=fields["connection_string"],
            account_url=account_url,
            credential=fields["credential"],
        )

    @classmethod
    def from_record(
        cls, described: Mapping[str, Any], uuid: str, like: CheckpointStorage | None = None
    ) -> AzureStorage | None:
        """The storage a registered checkpoint's record names (see ``describe``), with ``like``'s
        credentials when ``like`` is the same account; None when the record is no azure record of
        ``uuid``."""
        place = cls.placed(described, uuid)
        if place is None:
            return None
        container, prefix = place
        account_url = described.get("account_url") or None
        if isinstance(like, AzureStorage):
            return like.moved(container, prefix, account_url)
        return cls(container, prefix=prefix, account_url=account_url)

    def moved(self, container: str, prefix: str, account_url: str | None) -> AzureStorage:
        """The same credentials at another container or prefix; another account gets none of them."""
        if account_url is None or _account_url(account_url) == self._account():
            return AzureStorage(
                container,
                prefix=prefix,
                connection_string=self._connection_string,
                account_url=self.account_url,
                credential=self._credential,
            )
        return AzureStorage(container, prefix=prefix, account_url=account_url)

    def describe(self, uuid: str) -> dict[str, str]:
        described = {"type": self.type, "container": self.bucket, "key": self.key(uuid)}
        account = self._account()
        if account:
            described["account_url"] = account
        return described

    def location(self, uuid: str) -> str:
        account = self._account()
        host = account.split("://", 1)[-1] + "/" if account else ""
        return f"{self.scheme}://{host}{self.bucket}/{self.key(uuid)}"

    def exists(self, uuid: str) -> bool:
        with self.translated():
            listed = self._container().list_blobs(name_starts_with=self.key(uuid), results_per_page=1)
            return next(iter(listed), None) is not None

    def _list(self, prefix: str) -> Iterable[tuple[str, int]]:
        for blob in self._container().list_blobs(name_starts_with=prefix):
            yield blob.name, int(blob.size)

    def _put(self, path: Path, key: str) -> None:
        with path.open("rb") as file:
            self._container().upload_blob(key, file, overwrite=True, max_concurrency=_CONCURRENCY)

    def _get(self, key: str, path: Path) -> None:
        with path.open("wb") as file:
            self._container().download_blob(key, max_concurrency=_CONCURRENCY).readinto(file)

    def _open(self, key: str) -> IO[bytes] | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            downloader = self._container().download_blob(key)
        except ResourceNotFoundError as error:
            if _code(error) == "BlobNotFound":
                return None
            raise
        return io.BufferedReader(_Chunks(downloader.chunks()), buffer_size=_BLOCK)

    def _delete(self, uuid: str, keys: Iterable[str]) -> None:
        """Delete ``keys`` 256 (Azure's most) a batch request, or one a request where the store
        refuses the batch; a blob already gone is no error."""
        from azure.core.exceptions import HttpResponseError

        container = self._container()
        listed = iter(keys)
        while batch := list(itertools.islice(listed, _BATCH)):
            try:
                answers = container.delete_blobs(
                    *batch, delete_snapshots="include", raise_on_any_failure=False
                )
                failed = [
                    (key, answer.headers.get("x-ms-error-code") or answer.status_code)
                    for key, answer in zip(batch, answers, strict=True)
                    if answer.status_code not in _GONE
                ]
            except HttpResponseError:
                failed = [(key, code) for key in batch if (code := self._delete_one(key))]
            if failed:
                key, code = failed[0]
                raise DetError(
                    f"checkpoint {uuid}: {len(failed)} blobs at {self.location(uuid)} "
                    f"could not be deleted, e.g. {key}: {code}"
                )

    def _delete_one(self, key: str) -> str:
        """Delete blob ``key``; the error code when it stays."""
        from azure.core.exceptions import HttpResponseError

        try:
            self._container().delete_blob(key, delete_snapshots="include")
        except HttpResponseError as error:
            if _code(error) != "BlobNotFound":
                return _code(error) or _first_line(error)
        return ""

    def _describe_error(self, error: BaseException) -> str | None:
        return _describe_error(error)

    def _container(self) -> Any:
        return self._client.get_container_client(self.bucket)

    def _connect(self) -> Any:
        try:
            from azure.storage.blob import BlobServiceClient
        except ImportError:
            raise DetError(
                f"{SECTION} type azure needs azure-storage-blob: pip install 'det-airflow[azure]'"
            ) from None
        sizes: dict[str, Any] = {
            "max_single_put_size": _BLOCK,
            "max_block_size": _BLOCK,
            "max_single_get_size": _BLOCK,
        }
        try:
            if self._connection_string:
                return BlobServiceClient.from_connection_string(self._connection_string, **sizes)
            if self.account_url and self._credential:
                return BlobServiceClient(self.account_url, credential=self._credential, **sizes)
            if os.environ.get(CONNECTION_STRING_VARIABLE):
                client = BlobServiceClient.from_connection_string(
                    os.environ[CONNECTION_STRING_VARIABLE], **sizes
                )
                if self.account_url is None or _account_url(self.account_url) == _account_url(client.url):
                    return client
            account_url = self.account_url or os.environ.get(ACCOUNT_URL_VARIABLE)
            if not account_url:
                raise DetError(
                    f"{SECTION}: {self.noun} {self.bucket!r}: no account given; set "
                    f"{SECTION}.connection_string or account_url, the {CONNECTION_STRING_VARIABLE} "
                    f"environment variable, or an Airflow connection ({SECTION}.wasb_conn_id)"
                )
            credential = self._credential or os.environ.get(CREDENTIAL_VARIABLE) or _default_credential()
            return BlobServiceClient(account_url, credential=credential, **sizes)
        except ValueError as error:  # a malformed connection string or URL
            raise DetError(f"{SECTION}: {self.noun} {self.bucket!r}: {error}") from None

    def endpoint(self) -> str:
        client = self.__dict__.get("_client")  # the client's, when built: it includes the env's
        if client is not None:
            return _account_url(client.url)
        return _account_url(self.account_url) if self.account_url else "Azure Blob Storage"

    def _account(self) -> str | None:
        """The account's URL, resolving the connection string or environment (offline) when
        needed; None when no account is given."""
        if self.account_url:
            return _account_url(self.account_url)
        try:
            return _account_url(self._client.url)
        except DetError:
            return None


class _Chunks(io.RawIOBase):
    """A blob's body as a raw stream, fetched chunk by chunk as it is read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._chunk = memoryview(b"")
        self._read = 0  # of the chunk: sliced off in place, not copied at each read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._read == len(self._chunk):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk, self._read = memoryview(chunk), 0
        size = min(len(buffer), len(self._chunk) - self._read)
        buffer[:size] = self._chunk[self._read : self._read + size]
        self._read += size
        return size


def _account_url(url: str) -> str:
    """The account's blob endpoint in ``url``, without the SAS token it may carry."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def same_account(connection_string: str, account_url: str) -> bool:
    """Whether ``connection_string`` names the account at ``account_url`` (read offline)."""
    from azure.storage.blob import BlobServiceClient

    try:
        client = BlobServiceClient.from_connection_string(connection_string)
    except ValueError:
        return False
    return _account_url(client.url) == _account_url(account_url)


def _default_credential() -> Any:
    """azure-identity's chain of the machine's identities; None (anonymous) without azure-identity."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    return _FailingFast(DefaultAzureCredential())


class _FailingFast:
    """A token credential whose failure ends the request at once: the storage client retries an
    Azure error for about a minute, and no retry makes a missing identity appear (azure-identity
    retries its own token endpoints)."""

    def __init__(self, credential: Any) -> None:
        self._credential = credential

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        try:
            return self._credential.get_token(*scopes, **kwargs)
        except ClientAuthenticationError as error:
            raise _NoToken(_first_line(error)) from error


class _NoToken(Exception):
    """No token for the store: not an Azure error, so that the storage client does not retry it."""


def _code(error: Any) -> str:
    code = getattr(error, "error_code", None) or ""
    return str(getattr(code, "value", code))


def _first_line(error: BaseException) -> str:
    return next(iter(str(error).strip().splitlines()), "") or type(error).__name__


def _describe_error(error: BaseException) -> str | None:
    """What went wrong, for an azure-storage-blob or azure-identity error (or one caused by one);
    None for other errors."""
    from azure.core.exceptions import (
        AzureError,
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
    )

    advice = (
        "set checkpoint_storage.connection_string, or account_url and credential, the "
        "AZURE_STORAGE_CONNECTION_STRING environment variable, or an Airflow connection "
        "(checkpoint_storage.wasb_conn_id)"
    )
    for link in causes(error):
        if isinstance(link, ClientAuthenticationError) and link.response is None:
            # No answer from the store: a credential (azure-identity's) found no token to send.
            return f"no credentials found ({_first_line(link)}); {advice}"
        if isinstance(link, HttpResponseError):
            code, text = _code(link), _first_line(link)
            return f"{code}: {text}" if code and text != code else text
        if isinstance(link, ServiceRequestError):
            return f"cannot connect: {_first_line(causes(link)[-1])}"
        if isinstance(link, AzureError):
            return _first_line(link)
    if type(error).__module__.startswith("azure."):
        return _first_line(error)
    return None
