"""Checkpoint storage throughput: saving and restoring one 200 MB checkpoint state through the
Core API's storage, in each object store against a local server of it (the ones the tests use, on
loopback: moto's S3 server, fake-gcs-server, Azurite) and in ``shared_fs`` (a folder on this
machine's disk), in the same run.

Each figure is the median of ``--repeat`` saves (``writing``: the files written into the folder
the storage hands out, then uploaded whole before the checkpoint would be registered) and
restores (``local_path``: the files brought back and read), in MB/s of checkpoint bytes. The
object store runs on the same 2 cores as the client, so its figures are a floor, not what a
real store behind a network gives.

    .venv/bin/python benchmarks/checkpoint_storage.py [--mb 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from det_airflow.core._azure import AzureStorage  # noqa: E402
from det_airflow.core._gcs import GCSStorage  # noqa: E402
from det_airflow.core._s3 import S3Storage  # noqa: E402
from det_airflow.core._storage import CheckpointStorage, FolderStorage  # noqa: E402
from tests.azure_server import azure_server  # noqa: E402
from tests.gcs_server import gcs_server  # noqa: E402
from tests.s3_server import s3_server  # noqa: E402

BUCKET = "bench-checkpoints"
FILES = 4  # a state of several files, as a model, optimizer and trainer state are


def _state(total_mb: int) -> list[bytes]:
    size = total_mb * 1024 * 1024 // FILES
    return [os.urandom(size) for _ in range(FILES)]


def _save(storage: CheckpointStorage, state: list[bytes]) -> str:
    name = str(uuid.uuid4())
    with storage.writing(name) as folder:
        for index, blob in enumerate(state):
            (folder / f"part-{index}.bin").write_bytes(blob)
    return name


def _restore(storage: CheckpointStorage, name: str, total: int) -> None:
    with storage.local_path(name) as folder:
        read = sum(len(p.read_bytes()) for p in folder.iterdir())
    if read != total:
        raise RuntimeError(f"restored {read} bytes of {total}")


def measure(storage: CheckpointStorage, state: list[bytes], repeat: int) -> tuple[float, float]:
    """(save MB/s, restore MB/s), medians over ``repeat``."""
    total = sum(len(b) for b in state)
    saves, restores = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        name = _save(storage, state)
        saves.append(time.perf_counter() - start)
        start = time.perf_counter()
        _restore(storage, name, total)
        restores.append(time.perf_counter() - start)
        storage.delete(name)
    megabytes = total / 1e6
    return megabytes / statistics.median(saves), megabytes / statistics.median(restores)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    state = _state(args.mb)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the S3 server's request lines
    with tempfile.TemporaryDirectory(prefix="det-bench-storage-") as folder:
        shared = measure(FolderStorage(Path(folder)), state, args.repeat)
    figures: dict[str, tuple[float, float]] = {}
    with s3_server(BUCKET) as url:
        for key, value in (("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s")):
            os.environ.setdefault(key, value)
        storage: CheckpointStorage = S3Storage(BUCKET, prefix="bench", endpoint_url=url, region="us-east-1")
        figures["s3 (moto server)"] = measure(storage, state, args.repeat)
    with gcs_server(BUCKET) as url:
        storage = GCSStorage(BUCKET, prefix="bench", endpoint_url=url)
        figures["gcs (fake-gcs-server)"] = measure(storage, state, args.repeat)
    with azure_server(BUCKET) as connection_string:
        storage = AzureStorage(BUCKET, prefix="bench", connection_string=connection_string)
        figures["azure (Azurite)"] = measure(storage, state, args.repeat)
    print(f"Checkpoint of {args.mb} MB in {FILES} files, median of {args.repeat}; servers on loopback\n")
    print("| storage | save MB/s | restore MB/s | save / shared_fs | restore / shared_fs |")
    print("|---|---:|---:|---:|---:|")
    print(f"| shared_fs (local disk) | {shared[0]:.0f} | {shared[1]:.0f} | 1.00× | 1.00× |")
    for name, (save, restore) in figures.items():
        print(
            f"| {name} | {save:.0f} | {restore:.0f} | {save / shared[0]:.2f}× | {restore / shared[1]:.2f}× |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
