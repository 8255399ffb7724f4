"""Input limits and exactly-once create on a real Airflow (API server, DAG processor, PostgreSQL):
concurrent creates, a retried request id, and contexts refused at upload with nothing stored."""

from __future__ import annotations

import base64
import gzip
import io
import re
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from det_airflow.context_archive import LIMITS, format_size
from det_airflow.master.limits import BODY_LIMIT
from tests.integration.det_env import DetEnv

pytestmark = pytest.mark.integration

CONFIG = """\
name: limits probe
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length: {batches: 10}
max_restarts: 0
"""


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    env = DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))
    yield env
    # Created paused; kill what is left so no DAG run outlives the module.
    with env.api() as client:
        for experiment in client.get("/det/api/v1/experiments?all=true").json()["experiments"]:
            if experiment["state"] in ("ACTIVE", "PAUSED"):
                client.post(f"/det/api/v1/experiments/{experiment['id']}/kill")


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "train.py").write_text("print('never run')\n")
    (tmp_path / "config.yaml").write_text(CONFIG)
    return tmp_path


def _listed_ids(det: DetEnv) -> set[int]:
    out = det.det("experiment", "list", "--all").stdout
    return {int(m) for m in re.findall(r"^\s*(\d+)\s*\|", out, re.MULTILINE)}


def _post_create(det: DetEnv, body: dict[str, object]) -> httpx.Response:
    """POST a create as an HTTP client following the API's rule would: a 429 with Retry-After (the
    user's creates in flight at their cap, refused before any work) is waited out and sent again."""
    with det.api() as client:
        for _ in range(120):
            answer = client.post("/det/api/v1/experiments", json={"config": CONFIG, "paused": True, **body})
            if answer.status_code != 429 or "Retry-After" not in answer.headers:
                return answer
            time.sleep(float(answer.headers["Retry-After"]))
        return answer


def test_ten_concurrent_det_creates_all_succeed_with_distinct_ids(det: DetEnv, context_dir: Path) -> None:
    before = _listed_ids(det)
    args = ("experiment", "create", "--paused", str(context_dir / "config.yaml"), str(context_dir / "ctx"))
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: det.det(*args, check=False), range(10)))
    assert [r.returncode for r in results] == [0] * 10, [r.stdout + r.stderr for r in results]
    ids = {int(m.group(1)) for r in results if (m := re.search(r"Created experiment (\d+)", r.stdout))}
    assert len(ids) == 10, [r.stdout for r in results]
    assert _listed_ids(det) == before | ids


def test_ten_concurrent_creates_with_one_request_id_make_one_experiment(det: DetEnv) -> None:
    before = _listed_ids(det)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: _post_create(det, {"request_id": "integration-burst"}), range(10)))
    assert [a.status_code for a in answers] == [200] * 10, [a.text for a in answers]
    ids = {a.json()["experiment"]["id"] for a in answers}
    assert len(ids) == 1
    assert _listed_ids(det) == before | ids


def _gzip_bomb(size: int) -> bytes:
    """A tar.gz holding one file of ``size`` zero bytes, about a thousandth of that compressed."""
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


def test_a_gzip_bomb_context_is_refused_at_create_and_nothing_is_stored(det: DetEnv) -> None:
    size = 1100 * 1024 * 1024
    bomb = _gzip_bomb(size)
    assert len(bomb) < 1_200_000
    before = _listed_ids(det)
    answer = _post_create(det, {"context": base64.b64encode(bomb).decode()})
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        f"context: the files expand to at least {format_size(size)}, over the limit of "
        f"{format_size(LIMITS.content_bytes)}; largest files: data/zeros.bin ({format_size(size)})"
    )
    assert _listed_ids(det) == before


def test_a_context_that_is_not_a_tar_gz_is_refused_at_create(det: DetEnv) -> None:
    before = _listed_ids(det)
    answer = _post_create(det, {"context": base64.b64encode(b"PK\x03\x04 a zip, not a tar.gz").decode()})
    assert answer.status_code == 400
    assert answer.json()["detail"] == "context: not a tar.gz archive"
    assert _listed_ids(det) == before


def test_a_streamed_body_past_the_limit_is_refused_by_the_api_server(det: DetEnv) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the server has to count
        yield b'{"label": "x"'
        for _ in range(BODY_LIMIT // (1024 * 1024) + 4):
            yield b" " * (1024 * 1024)
        yield b"}"

    with det.api() as client:
        answer = client.post(
            "/det/api/v1/experiments/1/labels", content=chunks(), headers={"content-type": "application/json"}
        )
    assert answer.status_code == 413
    assert f"is over the limit of {format_size(BODY_LIMIT)}" in answer.json()["detail"]
