"""Checkpoints in a Google Cloud Storage bucket (or an emulator of it), through google-cloud-storage.

What every object store does with a checkpoint is in ``_objects``; here are google-cloud-storage's calls.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from det_airflow.core._objects import SECTION, ObjectStorage, causes, string_field
from det_airflow.core._storage import CheckpointStorage
from det_airflow.errors import DetError

# A service account key's JSON, for code that sets it itself (the platform's never reaches a trial).
CREDENTIALS_VARIABLE = "DET_GCS_CREDENTIALS"
# Where google-cloud-storage sends requests when no endpoint is given, and the variable by which it
# is pointed at an emulator instead.
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
# The variables by which google.auth's default chain is given a key file, and a project.
KEY_FILE_VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
PROJECT_VARIABLE = "GOOGLE_CLOUD_PROJECT"
# The section's fields read here; gcp_conn_id names an Airflow connection, resolved outside the trial.
_FIELDS = ("bucket", "prefix", "endpoint_url", "project")
NO_CREDENTIALS = (
    f"no credentials found; set {KEY_FILE_VARIABLE}, "
    "or an Airflow connection (checkpoint_storage.gcp_conn_id)"
)
# "GET https://host/storage/v1/b/bucket/o?...: " in front of the server's message.
_REQUEST_PREFIX = re.compile(r"^[A-Z]+ \S+: ")


class GCSStorage(ObjectStorage):
    """Checkpoints as objects under ``gs://<bucket>/<prefix>/<uuid>/``.

    Credentials come from ``credentials_info`` (a service account key, as the master reads it from
    an Airflow connection) when given, else from the ``DET_GCS_CREDENTIALS`` variable (the same
    JSON), else from google.auth's default chain (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
    application default credentials, the metadata server). An emulator takes any request, so at an
    endpoint (``endpoint_url``, or ``STORAGE_EMULATOR_HOST`` without it) requests go without
    credentials when none are found.

    Example::

        storage = GCSStorage("ckpts", prefix="team-a", endpoint_url="http://127.0.0.1:4443")
        with storage.writing(uuid) as folder:
            (folder / "model.pt").write_bytes(data)
    """

    type = "gcs"
    scheme = "gs"

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        project: str | None = None,
        credentials_info: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(bucket, prefix)
        self.endpoint_url = endpoint_url
        self.project = project
        self._credentials_info = credentials_info

    @classmethod
    def from_config(cls, storage: Mapping[str, Any] | str | os.PathLike[str]) -> GCSStorage:
        """From a ``gcs`` section: ``bucket``, and optionally ``prefix``, ``endpoint_url`` (an
        emulator or a private endpoint), ``project``, and ``credentials_info`` where the master
        has filled in its Airflow connection's key."""
        if not isinstance(storage, Mapping):
            raise DetError(f"{SECTION}: expected a gcs section, got {storage!r}")
        fields = {key: string_field(storage, key) for key in _FIELDS}
        if not fields["bucket"]:
            raise DetError(f"{SECTION}.bucket: required for type gcs")
        credentials_info = storage.get("credentials_info") or None
        if credentials_info is not None and not isinstance(credentials_info, Mapping):
            raise DetError(f"{SECTION}.credentials_info: expected a service account key (a JSON object)")
        return cls(
            fields["bucket"],
            prefix=fields["prefix"] or "",
            endpoint_url=fields["endpoint_url"],
            project=fields["project"],
            credentials_info=credentials_info,
        )

    @classmethod
    def from_record(
        cls, described: Mapping[str, Any], uuid: str, like: CheckpointStorage | None = None
    ) -> GCSStorage | None:
        """The storage a registered checkpoint's record names (see ``describe``), with ``like``'s
        credentials when ``like`` is the same store; None when the record is no gcs record of ``uuid``."""
        place = cls.placed(described, uuid)
        if place is None:
            return None
        bucket, prefix = place
        endpoint_url = described.get("endpoint_url") or None
        if isinstance(like, GCSStorage):
            return like.moved(bucket, prefix, endpoint_url)
        return cls(bucket, prefix=prefix, endpoint_url=endpoint_url)

    def moved(self, bucket: str, prefix: str, endpoint_url: str | None) -> GCSStorage:
        """The same credentials at another bucket or prefix; another endpoint gets none of them."""
        same_store = endpoint_url == self.endpoint_url
        return GCSStorage(
            bucket,
            prefix=prefix,
            endpoint_url=endpoint_url,
            project=self.project,
            credentials_info=self._credentials_info if same_store else None,
        )

    def describe(self, uuid: str) -> dict[str, str]:
        described = {"type": self.type, "bucket": self.bucket, "key": self.key(uuid)}
        if self.endpoint_url:
            described["endpoint_url"] = self.endpoint_url
        return described

    def exists(self, uuid: str) -> bool:
        with self.translated():
            listed = self._client.list_blobs(self.bucket, prefix=self.key(uuid), max_results=1)
            return next(iter(listed), None) is not None

    def _list(self, prefix: str) -> Iterable[tuple[str, int]]:
        for page in self._client.list_blobs(self.bucket, prefix=prefix).pages:
            for blob in page:
                yield blob.name, int(blob.size or 0)

    def _put(self, path: Path, key: str) -> None:
        # Files past 8 MiB go up as resumable uploads, in chunks.
        self._client.bucket(self.bucket).blob(key).upload_from_filename(str(path))

    def _get(self, key: str, path: Path) -> None:
        self._client.bucket(self.bucket).blob(key).download_to_filename(str(path))

    def _open(self, key: str) -> IO[bytes] | None:
        blob = self._client.bucket(self.bucket).get_blob(key)
        if blob is None:
            return None
        stream: IO[bytes] = blob.open("rb")
        return stream

    def _delete(self, uuid: str, keys: Iterable[str]) -> None:
        """Delete ``keys`` one request each: emulators (fake-gcs-server) take no batch requests."""
        from google.api_core.exceptions import NotFound

        bucket = self._client.bucket(self.bucket)
        for key in keys:
            try:
                bucket.delete_blob(key)
            except NotFound:  # gone already: what deleting it was for
                pass

    def _describe_error(self, error: BaseException) -> str | None:
        return _describe_error(error)

    def _connect(self) -> Any:
        try:
            from google.cloud import storage
        except ImportError:
            raise DetError(
                f"{SECTION} type gcs needs google-cloud-storage: pip install 'det-airflow[gcs]'"
            ) from None
        credentials, project = self._credentials()
        options = {"api_endpoint": self.endpoint_url} if self.endpoint_url else None
        # project=None (not left out) keeps the client from looking for one: a project is needed
        # only to create or list buckets.
        return storage.Client(
            project=self.project or project or os.environ.get(PROJECT_VARIABLE) or None,
            credentials=credentials,
            client_options=options,
        )

    def _credentials(self) -> tuple[Any, str | None]:
        """The credentials to send and the project they name, in the order the class docstring gives."""
        import google.auth
        from google.auth.credentials import AnonymousCredentials
        from google.auth.exceptions import DefaultCredentialsError

        if self._credentials_info is not None:
            return _key_credentials(
                self._credentials_info, "the key of checkpoint_storage's Airflow connection"
            )
        given = os.environ.get(CREDENTIALS_VARIABLE)
        if given:
            return _key_credentials(_parsed_key(given), CREDENTIALS_VARIABLE)
        try:
            return google.auth.default()
        except DefaultCredentialsError:
            # A key file named but unreadable is the user's to fix, also at an emulator.
            if os.environ.get(KEY_FILE_VARIABLE) or not self._given_endpoint():
                raise
        return AnonymousCredentials(), None

    def _given_endpoint(self) -> str | None:
        return self.endpoint_url or os.environ.get(EMULATOR_VARIABLE) or None

    def endpoint(self) -> str:
        client = self.__dict__.get("_client")  # the client's, when built: it includes the env's
        if client is not None:
            return str(client.api_endpoint)
        return self._given_endpoint() or DEFAULT_ENDPOINT


def _parsed_key(text: str) -> Mapping[str, Any]:
    """The key in ``DET_GCS_CREDENTIALS``; its text is never shown, as it holds a private key."""
    try:
        info = json.loads(text)
    except ValueError:
        info = None
    if not isinstance(info, Mapping):
        raise DetError(
            f"{CREDENTIALS_VARIABLE}: expected a service account key's JSON; it is not a JSON object"
        )
    return info


def _key_credentials(info: Mapping[str, Any], source: str) -> tuple[Any, str | None]:
    """Credentials of service account key ``info`` and its project; errors name ``source``."""
    from google.auth.exceptions import MalformedError
    from google.oauth2 import service_account

    if info.get("type") != "service_account":
        raise DetError(
            f"{source}: expected a service account key (type service_account), got type {info.get('type')!r}"
        )
    try:
        credentials = service_account.Credentials.from_service_account_info(info)
    except MalformedError as error:  # names the missing fields, never their values
        raise DetError(f"{source}: {error}") from None
    except ValueError:
        raise DetError(f"{source}: its private_key could not be read") from None
    project = info.get("project_id")
    return credentials, project if isinstance(project, str) and project else None


def _describe_error(error: BaseException) -> str | None:
    """What went wrong, for an error of google-cloud-storage or its transport (or one caused by
    one); None for other errors."""
    from google.api_core.exceptions import GoogleAPICallError
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    for link in causes(error):
        if isinstance(link, DefaultCredentialsError):
            if os.environ.get(KEY_FILE_VARIABLE):
                return f"{KEY_FILE_VARIABLE}: {_first_line(link)}"
            return NO_CREDENTIALS
        if isinstance(link, GoogleAPICallError):
            name = type(link).__name__
            text = _api_message(link)
            return f"{name}: {text}" if text and text.replace(" ", "").lower() != name.lower() else name
        if isinstance(link, GoogleAuthError):  # e.g. a key the token server refuses
            return f"{type(link).__name__}: {_first_line(link)}"
    if type(error).__module__.startswith("google.") or _raised_through_google(error):
        return _first_line(error)
    return None


def _api_message(error: Any) -> str:
    """The server's message, without the request it answers (its method and URL)."""
    for detail in getattr(error, "errors", None) or ():
        if isinstance(detail, Mapping) and detail.get("message"):
            return str(detail["message"])
    text = _REQUEST_PREFIX.sub("", str(getattr(error, "message", "") or ""), count=1).strip()
    try:  # an upload's error carries the server's answer as it came: JSON
        text = str(json.loads(text.splitlines()[0])["error"]["message"])
    except (ValueError, LookupError, TypeError):
        pass
    return text.splitlines()[0] if text else ""


def _first_line(error: BaseException) -> str:
    """An error's message on one line; google.auth's carry a tuple of message and answer."""
    first = error.args[0] if len(error.args) > 1 and isinstance(error.args[0], str) else str(error)
    return first.strip().splitlines()[0] if first.strip() else type(error).__name__


def _raised_through_google(error: BaseException) -> bool:
    """Whether ``error`` (e.g. a requests or urllib3 connection error) came out of google's modules,
    not from code of the user's that ran meanwhile."""
    frame = error.__traceback__
    while frame is not None:
        if str(frame.tb_frame.f_globals.get("__name__", "")).startswith("google."):
            return True
        frame = frame.tb_next
    return False
