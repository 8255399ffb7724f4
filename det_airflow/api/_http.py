"""The one HTTP session every client of the master uses (CLI, operators, triggers, training code)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from det_airflow.errors import APIError

API_PREFIX = "/det/api/v1"
DEFAULT_MASTER = "localhost:8080"
# Connection errors are retried with backoff for this long: the API server may be restarting.
# People (the CLI) want a quick answer; tasks and trials would rather wait out a restart.
DEFAULT_RETRY_SECONDS = 3.0
SERVICE_RETRY_SECONDS = 180.0
# Airflow's answer (403) to a bearer token it cannot verify.
AIRFLOW_INVALID_TOKEN = "Invalid JWT token"


def normalize_master_url(address: str | None) -> str:
    """`host:port` → `http://host:port`; a URL is kept; trailing slashes dropped."""
    address = (address or DEFAULT_MASTER).strip()
    if "://" not in address:
        address = f"http://{address}"
    return address.rstrip("/")


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', []))}: {item.get('msg')}" for item in detail
        )
    return str(detail or body)


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
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.master + API_PREFIX, headers=headers, timeout=timeout)

    def close(self) -> None:
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
        retried: type[Exception] | tuple[type[Exception], ...] = (
            httpx.TransportError if resend_on_failure else (httpx.ConnectError, httpx.RemoteProtocolError)
        )
        deadline: float | None = None  # counted from the first failure, so a slow answer still gets a retry
        delay = 0.25
        while True:
            try:
                response = self._client.request(method, path, **kwargs)
                break
            except httpx.TransportError as exc:
                if deadline is None:
                    deadline = time.monotonic() + self.retry_seconds
                if not isinstance(exc, retried) or time.monotonic() + delay > deadline:
                    if isinstance(exc, httpx.TimeoutException):
                        raise APIError(f"the master at {self.master} did not answer in time") from None
                    raise APIError(f"cannot reach the master at {self.master}: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        if response.status_code == 403 and _error_message(response) == AIRFLOW_INVALID_TOKEN:
            # Airflow refuses a token it cannot verify (say, signed before its JWT secret changed)
            # with 403; it is a stale login, not a missing permission.
            raise APIError(
                f"the master at {self.master} refused the stored login ({AIRFLOW_INVALID_TOKEN}): "
                "run `det user login`, or set DET_USER and DET_PASS",
                status_code=401,
            )
        if response.status_code == 401:
            raise APIError(
                f"not logged in to {self.master} (or the session expired): run `det user login`",
                status_code=401,
            )
        if response.status_code == 403:
            raise APIError(f"permission denied: {_error_message(response)}", status_code=403)
        if response.status_code >= 400:
            raise APIError(_error_message(response), status_code=response.status_code)
        return response

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        response = self.request("POST", path, json=json, **kwargs)
        return response.json() if response.content else None

    def delete(self, path: str, **kwargs: Any) -> Any:
        response = self.request("DELETE", path, **kwargs)
        return response.json() if response.content else None


class AsyncSession:
    """Asynchronous twin of Session, for Airflow triggers."""

    def __init__(self, master: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.master = normalize_master_url(master)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(base_url=self.master + API_PREFIX, headers=headers, timeout=timeout)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise APIError(f"cannot reach the master at {self.master}: {exc}") from None
        if response.status_code >= 400:
            raise APIError(_error_message(response), status_code=response.status_code)
        return response.json() if response.content else None
