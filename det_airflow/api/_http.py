"""The HTTP sessions clients of the master use: Session (CLI, operators; httpx), AsyncSession
(triggers) and TrialSession (training code; the standard library's http.client)."""

from __future__ import annotations

import functools
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from det_airflow.errors import APIError, DetError

if TYPE_CHECKING:
    import http.client

    import httpx

API_PREFIX = "/det/api/v1"
DEFAULT_MASTER = "localhost:8080"
# Connection errors are retried with backoff for this long: the API server may be restarting.
# People (the CLI) want a quick answer; tasks and trials would rather wait out a restart.
DEFAULT_RETRY_SECONDS = 3.0
UNAVAILABLE = 503
TOO_MANY = 429
# A 429 with Retry-After (the user's cap on work that ends by itself, such as creates in flight) is
# waited out this long before it is shown: a burst of creates is spread out, not refused.
BUSY_RETRY_SECONDS = 120.0
SERVICE_RETRY_SECONDS = 180.0
# Airflow's answer (403) to a bearer token it cannot verify.
AIRFLOW_INVALID_TOKEN = "Invalid JWT token"
# How long the clients of people (the CLI, scripts) wait for the master: to connect, and for each
# read of an answer (a download that keeps receiving is never cut off). A master behind a slow link
# or proxy may need longer. At most a day: sockets refuse timeouts past what the OS can count.
REQUEST_TIMEOUT_ENV = "DET_REQUEST_TIMEOUT"
DEFAULT_REQUEST_TIMEOUT = 30.0
MAX_REQUEST_TIMEOUT = 86400.0


def normalize_master_url(address: str | None) -> str:
    """`host:port` → `http://host:port`; a URL is kept; trailing slashes dropped."""
    address = (address or DEFAULT_MASTER).strip()
    if "://" not in address:
        address = f"http://{address}"
    return address.rstrip("/")


def request_timeout() -> float:
    """Seconds a request of the people's clients waits for the master: ``$DET_REQUEST_TIMEOUT``, else
    30 (also when it is set empty, as an empty ``DET_MASTER`` counts as unset).

    Raises:
        DetError: It is set to anything but a number of seconds above 0 and at most a day.
    """
    value = os.environ.get(REQUEST_TIMEOUT_ENV)
    if value is None or not value.strip():
        return DEFAULT_REQUEST_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_REQUEST_TIMEOUT:  # NaN fails too
        raise DetError(
            f"{REQUEST_TIMEOUT_ENV}={value!r}: expected a number of seconds above 0 and at most "
            f"{MAX_REQUEST_TIMEOUT:g}, such as {REQUEST_TIMEOUT_ENV}=120"
        )
    return seconds


def _error_message(response: httpx.Response) -> str:
    return _message_of(response.text, response.reason_phrase)


def _message_of(text: str, reason: str) -> str:
    """The master's own words in an error answer: FastAPI's ``detail``, else the body, else the reason."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip() or reason
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', []))}: {item.get('msg')}" for item in detail
        )
    return str(detail or body)


class _Backoff:
    """The waits between tries of one request: 0.25 s doubling up to 2 s, for as long as the first
    failure plus ``seconds`` allows (counted from the failure, so a slow answer still gets a retry)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline: float | None = None
        self.delay = 0.25

    def wait(self) -> bool:
        """Sleeps before the next try; False, without sleeping, when it would end past the deadline."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.seconds
        if time.monotonic() + self.delay > self.deadline:
            return False
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, 2.0)
        return True


def _busy_wait(retry_after: str | None, deadline: float) -> bool:
    """Sleeps as a 429's ``Retry-After`` asks (at most 5 s at a time); False when the answer named
    no wait, or the wait would end past ``deadline``: the 429 is then the answer."""
    if retry_after is None:
        return False
    try:
        delay = min(max(float(retry_after), 0.05), 5.0)
    except ValueError:
        return False
    if time.monotonic() + delay > deadline:
        return False
    time.sleep(delay)
    return True


class Session:
    """Synchronous session against the master's API, authenticated with one bearer token."""

    def __init__(
        self,
        master: str | None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_seconds: float | None = None,
    ) -> None:
        self.master = normalize_master_url(master)
        self.token = token
        self.retry_seconds = DEFAULT_RETRY_SECONDS if retry_seconds is None else retry_seconds
        self._timeout = timeout

    @functools.cached_property
    def _client(self) -> httpx.Client:
        # Made on the first request: importing httpx costs more than the rest of a client's start,
        # and a command that ends up sending nothing should not pay for it.
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(
            base_url=self.master + API_PREFIX, headers=headers, timeout=self._timeout, verify=tls_context()
        )

    def close(self) -> None:
        if "_client" in self.__dict__:
            self._client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, resend_on_failure: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """Send a request; map failures to APIError with the master's own message.

        A request that may have reached the master is sent again only with ``resend_on_failure``
        (a create carrying a request id, which the master deduplicates); the same body goes out.
        """
        import httpx

        retried: type[Exception] | tuple[type[Exception], ...] = (
            httpx.TransportError if resend_on_failure else (httpx.ConnectError, httpx.RemoteProtocolError)
        )
        backoff = _Backoff(self.retry_seconds)
        busy_deadline = time.monotonic() + BUSY_RETRY_SECONDS
        while True:
            try:
                response = self._client.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if isinstance(exc, retried) and backoff.wait():
                    continue
                if isinstance(exc, httpx.TimeoutException):
                    raise APIError(f"the master at {self.master} did not answer in time") from None
                raise APIError(f"cannot reach the master at {self.master}: {exc}") from None
            # 503: the master's database is away and nothing was stored; it is worth another try.
            if response.status_code == UNAVAILABLE and backoff.wait():
                continue
            # 429 with Retry-After: refused before any work was done; the same request may go again.
            if response.status_code == TOO_MANY and _busy_wait(
                response.headers.get("Retry-After"), busy_deadline
            ):
                continue
            break
        if response.status_code >= 400:
            _raise_for_status(self.master, response.status_code, _error_message(response))
        return response

    def download(self, path: str, target: Path) -> int:
        """Stream the answer to GET ``path`` into the file ``target`` (written beside it, then
        renamed into place); answers the bytes written."""
        import httpx

        partial = target.with_name(f".{target.name}.partial")
        try:
            with self._client.stream("GET", path) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for_status(self.master, response.status_code, _error_message(response))
                written = 0
                with partial.open("wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        out.write(chunk)
                        written += len(chunk)
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise APIError(f"downloading from the master at {self.master} failed: {exc}") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(target)
        return written

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        response = self.request("POST", path, json=json, **kwargs)
        return response.json() if response.content else None

    def delete(self, path: str, **kwargs: Any) -> Any:
        response = self.request("DELETE", path, **kwargs)
        return response.json() if response.content else None


def _raise_for_status(master: str, status_code: int, message: str) -> NoReturn:
    if status_code == 403 and message == AIRFLOW_INVALID_TOKEN:
        # Airflow refuses a token it cannot verify (say, signed before its JWT secret changed)
        # with 403; it is a stale login, not a missing permission.
        raise APIError(
            f"the master at {master} refused the stored login ({AIRFLOW_INVALID_TOKEN}): "
            "run `det user login`, or set DET_USER and DET_PASS",
            status_code=401,
        )
    if status_code == 401:
        raise APIError(
            f"not logged in to {master} (or the session expired): run `det user login`",
            status_code=401,
        )
    if status_code == 403:
        raise APIError(f"permission denied: {message}", status_code=403)
    raise APIError(message, status_code=status_code)


class TrialSession:
    """Session's twin for training code, on the standard library's ``http.client``.

    A trial process starts for every trial; importing httpx (and what it pulls in) would cost it
    several times what the rest of its start does. Same methods, retries and errors as Session
    (without ``resend_on_failure``: the routes of a trial need none), over one kept-alive connection.
    """

    def __init__(
        self,
        master: str | None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_seconds: float | None = None,
    ) -> None:
        from urllib.parse import urlsplit

        self.master = normalize_master_url(master)
        self.token = token
        self.retry_seconds = DEFAULT_RETRY_SECONDS if retry_seconds is None else retry_seconds
        self._timeout = timeout
        url = urlsplit(self.master)
        self._secure = url.scheme == "https"
        self._netloc = url.netloc
        self._prefix = url.path + API_PREFIX
        self._connection: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> TrialSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> http.client.HTTPConnection:
        import http.client
        import select

        idle = self._connection.sock if self._connection is not None else None
        if idle is not None and select.select([idle], [], [], 0)[0]:
            # An idle connection with something to read has been closed by the server (its
            # keep-alive ran out): reconnect rather than send a request that gets no answer.
            self.close()
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._secure else http.client.HTTPConnection
            self._connection = kind(self._netloc, timeout=self._timeout)
        return self._connection

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send a request; answers the decoded JSON body (None when empty). Failures are APIError."""
        import http.client

        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        backoff = _Backoff(self.retry_seconds)
        while True:
            connection = self._connect()
            sent = False
            try:
                connection.request(method, self._prefix + path, body=data, headers=headers)
                sent = True
                response = connection.getresponse()
                status, reason, content = response.status, response.reason, response.read()
            except OSError as exc:  # refused, reset, timed out, name not found; http.client's too
                self.close()
                # As Session: a refused or dropped connection is tried again (a dropped one had its
                # request unread), one that timed out after sending may have been carried out.
                if (not sent or isinstance(exc, ConnectionError)) and backoff.wait():
                    continue
                if isinstance(exc, TimeoutError):
                    raise APIError(f"the master at {self.master} did not answer in time") from None
                raise APIError(f"cannot reach the master at {self.master}: {exc}") from None
            except http.client.HTTPException as exc:
                self.close()
                raise APIError(f"the master at {self.master} sent a broken answer: {exc}") from None
            # 503: the master's database is away and nothing was stored; try again, as Session.
            if status == UNAVAILABLE and backoff.wait():
                continue
            break
        text = content.decode("utf-8", errors="replace")
        if status >= 400:
            _raise_for_status(self.master, status, _message_of(text, reason))
        return json.loads(text) if text else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, json: Any = None) -> Any:
        return self.request("POST", path, json)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def tls_context() -> Any:
    """The TLS context clients of this process use, as httpx would build it (SSL_CERT_FILE or
    SSL_CERT_DIR, else certifi): one per value of those variables.

    Building one reads the whole CA bundle: tens of milliseconds, and over a second on a loaded
    machine. A trigger polls from the triggerer's event loop, which every such read would block.
    """
    return _tls_context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _tls_context_for(cert_file: str | None, cert_dir: str | None) -> Any:
    import httpx

    return httpx.create_ssl_context()


class AsyncSession:
    """Asynchronous twin of Session, for Airflow triggers."""

    def __init__(self, master: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        import httpx

        self.master = normalize_master_url(master)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(
            base_url=self.master + API_PREFIX, headers=headers, timeout=timeout, verify=tls_context()
        )

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise APIError(f"cannot reach the master at {self.master}: {exc}") from None
        if response.status_code >= 400:
            raise APIError(_error_message(response), status_code=response.status_code)
        return response.json() if response.content else None
