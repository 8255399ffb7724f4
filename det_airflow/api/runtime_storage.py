"""Client of the master's ``/runtime/trials/{id}/storage`` routes: a trial's checkpoint and
TensorBoard files in object storage, sent and fetched through the master, which alone holds the
store's credentials (docs/object-storage.md).

Bodies stream both ways in blocks, over connections of the standard library's ``http.client`` (a
trial loads no httpx, as :class:`~det_airflow.api._http.TrialSession`); the small JSON calls go
through a TrialSession. Authenticated with the trial token, as every ``/runtime`` route.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from det_airflow.api._http import (
    API_PREFIX,
    SERVICE_RETRY_SECONDS,
    TOO_MANY,
    UNAVAILABLE,
    TrialSession,
    _Backoff,
    _message_of,
    _raise_for_status,
)
from det_airflow.errors import APIError

if TYPE_CHECKING:
    import http.client

# Bodies are sent and read in blocks of this size.
BLOCK = 1 << 20
# How long the answer to an upload may take: the master stores the file before it answers, so the
# wait grows with the file, as if the store took it at 8 MiB/s at least.
_ANSWER_SECONDS = 60.0
_STORE_BYTES_PER_SECOND = 8 * 1024**2
# A 429 (the trial sends too many large bodies at once) is waited out this long at most, looking
# again every _BUSY_WAIT seconds.
_BUSY_SECONDS = 600.0
_BUSY_WAIT = 0.5
# How long a download may wait for the master's next bytes.
_READ_SECONDS = 120.0


class StorageClient:
    """The storage routes of one trial: its own checkpoints' and TensorBoard files written, and
    files it may read (its owner's checkpoints, a warm start's, a TensorBoard's sources) read.

    Not for several threads at once: each thread that moves files makes its own.
    """

    def __init__(self, master: str | None, token: str | None, trial_id: int) -> None:
        self.trial_id = int(trial_id)
        self._session = TrialSession(master, token, retry_seconds=SERVICE_RETRY_SECONDS)
        self._token = token
        url = urlsplit(self._session.master)
        self._secure = url.scheme == "https"
        self._netloc = url.netloc
        self._prefix = url.path + API_PREFIX
        self._base = f"/runtime/trials/{self.trial_id}/storage"

    @property
    def master(self) -> str:
        return self._session.master

    def close(self) -> None:
        self._session.close()

    # --- checkpoints ---

    def checkpoint_files(self, uuid: str) -> dict[str, int]:
        """``{relative path: size}`` of checkpoint ``uuid``'s files: a registered checkpoint's
        registered files, or what this trial has written of its own so far (empty for none)."""
        answer = self._json("GET", f"{self._base}/checkpoints/{_quoted(uuid)}")
        return {str(name): int(size) for name, size in dict(answer.get("files") or {}).items()}

    def put_checkpoint_file(self, uuid: str, relative: str, path: Path) -> None:
        """Store the local file ``path`` as ``relative`` in this trial's checkpoint ``uuid``."""
        self._put(f"{self._base}/checkpoints/{_quoted(uuid)}/files/{_quoted(relative)}", path)

    def open_checkpoint_file(self, uuid: str, relative: str) -> IO[bytes] | None:
        """One file of checkpoint ``uuid`` as a stream (close it); None when it is not there."""
        return self._open(f"{self._base}/checkpoints/{_quoted(uuid)}/files/{_quoted(relative)}")

    def delete_checkpoint(self, uuid: str) -> None:
        """Delete the files of this trial's checkpoint ``uuid``."""
        self._json("DELETE", f"{self._base}/checkpoints/{_quoted(uuid)}")

    # --- TensorBoard files ---

    def put_tensorboard_file(self, relative: str, path: Path) -> None:
        """Store the local file ``path`` as ``relative`` among this trial's TensorBoard files."""
        self._put(f"{self._base}/tensorboard/files/{_quoted(relative)}", path)

    def tensorboard_files(self, trial_id: int) -> dict[str, tuple[int, str]]:
        """``{relative path: (size, signature)}`` of trial ``trial_id``'s TensorBoard files; a
        file's signature changes whenever the file does."""
        answer = self._json("GET", f"{self._base}/tensorboard/{int(trial_id)}")
        return {
            str(name): (int(entry["size"]), str(entry["signature"]))
            for name, entry in dict(answer.get("files") or {}).items()
        }

    def open_tensorboard_file(self, trial_id: int, relative: str) -> IO[bytes] | None:
        """One of trial ``trial_id``'s TensorBoard files as a stream; None when it is gone."""
        return self._open(f"{self._base}/tensorboard/{int(trial_id)}/files/{_quoted(relative)}")

    # --- the requests ---

    def _json(self, method: str, path: str) -> dict[str, Any]:
        try:
            answer = self._session.request(method, path)
        except APIError as exc:
            raise self._refused_token(exc) from None
        return dict(answer or {})

    def _refused_token(self, exc: APIError) -> APIError:
        if exc.status_code == 401:
            return APIError(
                f"the master at {self.master} refused this trial's token (DET_SESSION_TOKEN); "
                "the trial's run may have ended",
                status_code=401,
            )
        return exc

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        import http.client

        kind = http.client.HTTPSConnection if self._secure else http.client.HTTPConnection
        return kind(self._netloc, timeout=timeout, blocksize=BLOCK)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _put(self, path: str, source: Path) -> None:
        """PUT the file's bytes; sent again while the master is unreachable, restarting or busy
        (the same bytes to the same name: storing them twice is storing them once)."""
        import http.client

        size = source.stat().st_size
        headers = {
            **self._headers(),
            "Content-Type": "application/octet-stream",
            "Content-Length": str(size),
            "Accept": "application/json",
        }
        timeout = _ANSWER_SECONDS + size / _STORE_BYTES_PER_SECOND
        backoff = _Backoff(SERVICE_RETRY_SECONDS)
        busy_until = time.monotonic() + _BUSY_SECONDS
        while True:
            connection = self._connection(timeout)
            try:
                try:
                    with source.open("rb") as body:
                        connection.request("PUT", self._prefix + path, body=body, headers=headers)
                except (BrokenPipeError, ConnectionResetError):
                    # The master may have refused the file before reading all of it, and closed.
                    pass
                answer = connection.getresponse()
                status, reason, text = answer.status, answer.reason, answer.read().decode(errors="replace")
            except TimeoutError:
                raise APIError(f"the master at {self.master} did not answer in time") from None
            except (OSError, http.client.HTTPException) as exc:
                if backoff.wait():
                    continue
                raise APIError(f"cannot send {source.name} to the master at {self.master}: {exc}") from None
            finally:
                connection.close()
            if status == UNAVAILABLE and backoff.wait():
                continue
            if status == TOO_MANY and time.monotonic() < busy_until:
                # Other workers of the trial are sending their files: this one waits its turn.
                time.sleep(_BUSY_WAIT)
                continue
            break
        if status >= 400:
            self._raise(status, text, reason)

    def _open(self, path: str) -> IO[bytes] | None:
        """GET a body as a stream; None for a 404 that says the file is not there."""
        import http.client

        backoff = _Backoff(SERVICE_RETRY_SECONDS)
        while True:
            connection = self._connection(_READ_SECONDS)
            try:
                connection.request("GET", self._prefix + path, headers=self._headers())
                answer = connection.getresponse()
            except TimeoutError:
                connection.close()
                raise APIError(f"the master at {self.master} did not answer in time") from None
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                if backoff.wait():
                    continue
                raise APIError(f"cannot reach the master at {self.master}: {exc}") from None
            if answer.status < 400:
                return io.BufferedReader(_Body(answer, connection), BLOCK)
            text = answer.read().decode(errors="replace")
            connection.close()
            if answer.status == UNAVAILABLE and backoff.wait():
                continue
            if answer.status == 404 and _file_missing(text):
                return None
            self._raise(answer.status, text, answer.reason)

    def _raise(self, status: int, text: str, reason: str) -> None:
        try:
            _raise_for_status(self.master, status, _message_of(text, reason))
        except APIError as exc:
            raise self._refused_token(exc) from None


class _Body(io.RawIOBase):
    """An answer's body as a stream; closing it closes its connection. A body cut short raises
    (``http.client.IncompleteRead``) rather than ending early."""

    def __init__(self, answer: http.client.HTTPResponse, connection: http.client.HTTPConnection) -> None:
        self._answer = answer
        self._connection = connection

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._answer.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._answer.close()
            self._connection.close()
        super().close()


# In the master's 404 for a file that is not in the store (checkpoint or TensorBoard), as opposed
# to a route or a trial it does not know.
MISSING_FILE = "no file"


def _file_missing(text: str) -> bool:
    return MISSING_FILE in _message_of(text, "")


def _quoted(relative: str) -> str:
    return quote(relative, safe="/")
