"""What refusing hostile input costs the master: CPU time and peak memory of one
``POST /det/api/v1/experiments`` for a YAML alias bomb and a gzip bomb context, against an accepted
small create, in the same process.

The master's app runs in-process on a temporary SQLite metadata database with Airflow's simple auth
manager (the login itself is skipped: the request arrives as the admin), so the figures are the
master's own work for the request: body parsing, config parsing, context checks, and for the
accepted create the insert, the DAG file and the parse request.

    .venv/bin/python benchmarks/input_limits.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOME = Path(tempfile.mkdtemp(prefix="det-input-limits-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(HOME / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    }
)

from airflow import settings  # noqa: E402
from airflow.api_fastapi.app import create_auth_manager  # noqa: E402
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser  # noqa: E402
from airflow.api_fastapi.core_api.security import get_user  # noqa: E402
from airflow.models.dagbag import DagPriorityParsingRequest  # noqa: E402
from airflow.models.pool import Pool  # noqa: E402
from airflow.models.team import Team  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from det_airflow.context_archive import pack_context  # noqa: E402
from det_airflow.master.app import create_app  # noqa: E402
from det_airflow.master.db import get_database  # noqa: E402

CONFIG = (REPO / "examples" / "mnist_pytorch" / "const.yaml").read_text()


def alias_bomb(levels: int) -> str:
    """N levels of N aliases to the level below: N**N strings once expanded."""
    lines = ["l0: &l0 [" + ",".join(['"lol"'] * levels) + "]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * levels) + "]")
    return CONFIG + "\n".join(lines) + "\n"


def gzip_bomb(size: int) -> bytes:
    """A tar.gz of one file of ``size`` zero bytes (about a thousandth of that compressed)."""
    buffer = io.BytesIO()
    zeros = bytes(1024 * 1024)
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo("data/zeros.bin")
        info.size = size
        gz.write(info.tobuf(tarfile.PAX_FORMAT))
        for _ in range(size // len(zeros)):
            gz.write(zeros)
        gz.write(bytes(-size % tarfile.BLOCKSIZE + 2 * tarfile.BLOCKSIZE))
    return buffer.getvalue()


def start_master() -> TestClient:
    settings.configure_vars()
    settings.reconfigure_orm()
    assert settings.engine is not None
    for model in (Team, Pool, DagPriorityParsingRequest):
        model.__table__.create(settings.engine, checkfirst=True)  # type: ignore[attr-defined]
    with settings.Session() as session:  # type: ignore[misc]
        session.add(Pool(pool="default_pool", slots=8, description="", include_deferred=False))
        session.commit()
    get_database().migrate()
    create_auth_manager()
    app = create_app()

    async def admin() -> SimpleAuthManagerUser:
        return SimpleAuthManagerUser(username="admin", role="admin")

    app.dependency_overrides[get_user] = admin
    return TestClient(app)


def measure(send: Callable[[], Any], repeat: int) -> tuple[float, float, int, str]:
    """Median CPU seconds, peak traced MB, status and detail of the last answer."""
    cpu = []
    for _ in range(repeat):
        start = time.process_time()
        answer = send()
        cpu.append(time.process_time() - start)
    tracemalloc.start()
    answer = send()
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    detail = "" if answer.status_code == 200 else str(answer.json()["detail"]).splitlines()[0]
    return statistics.median(cpu), peak, answer.status_code, detail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    small_context = base64.b64encode(pack_context(REPO / "examples" / "mnist_pytorch").data).decode()
    bomb_size = 1100 * 1024 * 1024
    bomb = gzip_bomb(bomb_size)
    bomb_context = base64.b64encode(bomb).decode()
    # An accepted create whose upload is as large as the bomb's: incompressible bytes of that size.
    same_size = tempfile.mkdtemp(prefix="det-same-size-")
    Path(same_size, "train.py").write_text("print('hello')\n")
    Path(same_size, "weights.bin").write_bytes(os.urandom(len(bomb)))
    same_size_context = base64.b64encode(pack_context(same_size).data).decode()
    cases = [
        ("accepted small create (mnist example)", {"config": CONFIG, "context": small_context}),
        (
            f"accepted create, {len(bomb) / 1e6:.1f} MB context",
            {"config": CONFIG, "context": same_size_context},
        ),
        ("alias bomb 16x16 (16**16 values)", {"config": alias_bomb(16), "context": small_context}),
        (
            f"gzip bomb {len(bomb) / 1e6:.1f} MB -> {bomb_size / 2**30:.2f} GiB",
            {"config": CONFIG, "context": bomb_context},
        ),
    ]
    with start_master() as client:
        rows = []
        for label, body in cases:
            payload = {**body, "paused": True}
            rows.append(
                (label, *measure(lambda p=payload: client.post("/api/v1/experiments", json=p), args.repeat))
            )
    base_cpu, base_mb = rows[0][1], rows[0][2]
    print(f"POST /experiments in-process; median CPU of {args.repeat}, peak memory traced by tracemalloc")
    print(f"{'request':<40} {'CPU ms':>8} {'vs ok':>6} {'peak MB':>8} {'vs ok':>6}  answer")
    for label, cpu_s, peak_mb, status, detail in rows:
        print(
            f"{label:<40} {1000 * cpu_s:>8.2f} {cpu_s / base_cpu:>6.2f} {peak_mb:>8.2f} "
            f"{peak_mb / base_mb:>6.2f}  {status} {detail}"
        )


if __name__ == "__main__":
    main()
