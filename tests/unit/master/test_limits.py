"""Server-side input limits: body size (announced or streamed), config size, the context archive
at create time, and database refusals answered as 4xx rather than 500."""

from __future__ import annotations

import asyncio
import gzip
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Column, Integer, MetaData, Table, create_engine

from det_airflow.context_archive import LIMITS, format_size
from det_airflow.master import limits
from det_airflow.master.limits import BODY_LIMIT, CONFIG_LIMIT_CHARS, CREATE_BODY_LIMIT
from tests.unit.master.creating import CONFIG, Creator, b64, tar_gz
from tests.unit.master.people_app import People

JSON = {"content-type": "application/json"}


def _label_body(size: int) -> bytes:
    body = b'{"label": "padded"}'
    return body + b" " * (size - len(body))  # JSON allows trailing whitespace


def test_a_body_at_the_limit_is_read_and_one_byte_more_is_refused(people: People) -> None:
    e = people.add_experiment(owner="alice")
    path = f"/experiments/{e}/labels"
    at_limit = people.call("alice", "POST", path, content=_label_body(BODY_LIMIT), headers=JSON)
    assert at_limit.status_code == 200
    assert "padded" in at_limit.json()["experiment"]["labels"]

    over = people.call("alice", "POST", path, content=_label_body(BODY_LIMIT + 1) + b"", headers=JSON)
    assert over.status_code == 413
    assert over.json()["detail"] == (
        f"request body: {format_size(BODY_LIMIT + 1)} is over the limit of {format_size(BODY_LIMIT)} "
        f"for POST /api/v1{path}"
    )


async def _post_streamed(app: Any, path: str, chunks: list[bytes]) -> tuple[int, bytes, int]:
    """POST without a Content-Length, in chunks; answers status, body and chunks left unread."""
    pending = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]
    pending.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"x-test-user", b"alice"),
            (b"authorization", b"Bearer login-of-alice"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body, len(pending)


def test_a_streamed_body_without_content_length_is_cut_off_at_the_limit(people: People) -> None:
    e = people.add_experiment(owner="alice")
    chunk = b" " * (1024 * 1024)
    chunks = [b'{"label": "streamed"}', *[chunk] * 40]  # 40 MiB, far past the 16 MiB limit
    status, body, unread = asyncio.run(
        _post_streamed(people.client.app, f"/api/v1/experiments/{e}/labels", chunks)
    )
    assert status == 413
    assert f"more than {format_size(BODY_LIMIT)} is over the limit" in body.decode()
    assert unread > 20, "the server read on past the limit"
    assert "streamed" not in people.experiment(e).labels


def test_create_allows_a_full_size_context_in_base64() -> None:
    assert CREATE_BODY_LIMIT > 4 * LIMITS.archive_bytes // 3 + CONFIG_LIMIT_CHARS
    assert limits.body_limit("POST", "/det/api/v1/experiments") == CREATE_BODY_LIMIT
    assert limits.body_limit("POST", "/det/api/v1/experiments/3/labels") == BODY_LIMIT


def test_a_create_body_over_its_limit_is_refused_by_content_length(creator: Creator) -> None:
    answer = creator.people.call(
        "alice",
        "POST",
        "/experiments",
        content=b"{}",
        headers={**JSON, "content-length": str(CREATE_BODY_LIMIT + 1)},
    )
    assert answer.status_code == 413
    assert f"over the limit of {format_size(CREATE_BODY_LIMIT)}" in answer.json()["detail"]
    assert creator.count() == 0


def _padded_config(size: int) -> str:
    return CONFIG + "#" * (size - len(CONFIG) - 1) + "\n"


def test_a_config_at_the_limit_is_accepted_and_one_character_more_refused(creator: Creator) -> None:
    assert creator.create(config=_padded_config(CONFIG_LIMIT_CHARS)).status_code == 200
    over = creator.create(config=_padded_config(CONFIG_LIMIT_CHARS + 1))
    assert over.status_code == 422
    assert over.json()["detail"][0]["loc"] == ["body", "config"]
    assert (
        f"the config is {CONFIG_LIMIT_CHARS + 1} characters, over the limit of {CONFIG_LIMIT_CHARS} (1 MiB)"
        in over.json()["detail"][0]["msg"]
    )
    assert creator.count() == 1


def _bomb(size: int) -> bytes:
    """A tar.gz of one file of ``size`` zero bytes: tiny compressed."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo("weights/zeros.bin")
        info.size = size
        tar.addfile(info, io.BytesIO(bytes(size)))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ("not base64!", "context: not valid base64"),
        (b64(b"just some bytes"), "context: not a tar.gz archive"),
        (b64(gzip.compress(b"a gzip file, not a tar" * 100, mtime=0)), "context: not a tar.gz archive"),
        (b64(tar_gz({"../escape.py": b"x"})), "context: '../escape.py': its path contains '..'"),
        (b64(tar_gz({"/etc/cron.d/x": b"x"})), "context: '/etc/cron.d/x': it has an absolute path"),
    ],
)
def test_a_bad_context_is_refused_at_create_and_nothing_is_stored(
    creator: Creator, context: str, message: str
) -> None:
    answer = creator.create(context=context)
    assert answer.status_code == 400
    assert answer.json()["detail"] == message
    assert creator.count() == 0


def test_a_context_that_expands_past_the_limit_is_refused_with_its_largest_file(creator: Creator) -> None:
    bomb = _bomb(LIMITS.content_bytes + 1)
    assert len(bomb) < 200_000
    answer = creator.create(context=b64(bomb))
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        f"context: the files expand to at least {format_size(LIMITS.content_bytes + 1)}, over the limit of "
        f"{format_size(LIMITS.content_bytes)}; largest files: weights/zeros.bin "
        f"({format_size(LIMITS.content_bytes + 1)})"
    )
    assert creator.count() == 0


def test_a_context_of_exactly_the_limit_is_accepted(creator: Creator) -> None:
    answer = creator.create(context=b64(_bomb(LIMITS.content_bytes)))
    assert answer.status_code == 200
    assert creator.count() == 1


def test_an_archive_over_the_compressed_limit_is_refused_before_decoding(creator: Creator) -> None:
    too_long = "A" * (4 * -(-(LIMITS.archive_bytes + 3) // 3))
    answer = creator.create(context=too_long)
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        f"context: the archive is {format_size(len(too_long) * 3 // 4)}, over the limit of "
        f"{format_size(LIMITS.archive_bytes)}"
    )
    assert creator.count() == 0


def test_a_dag_run_registering_a_context_past_the_limit_is_refused_as_a_create_is(
    creator: Creator, people: People, service_headers: dict[str, str]
) -> None:
    """An experiment dropped into the DAGs folder registers its run with its context: the same
    limits as ``det e create``, the archive's size checked before it is decoded."""
    too_long = "A" * (4 * -(-(LIMITS.archive_bytes + 3) // 3))
    answer = people.client.post(
        "/api/v1/internal/experiments/register",
        headers=service_headers,
        json={"dag_id": "det_dropped", "run_id": "manual__1", "config": CONFIG, "context": too_long},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == (
        f"context: the archive is {format_size(len(too_long) * 3 // 4)}, over the limit of "
        f"{format_size(LIMITS.archive_bytes)}"
    )
    assert creator.count() == 0


def test_database_refusals_are_a_409_with_a_message(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'things.db'}")
    table = Table("things", MetaData(), Column("id", Integer, primary_key=True))
    table.metadata.create_all(engine)
    app = FastAPI()
    limits.install(app)

    @app.post("/things/{thing_id}")
    def add(thing_id: int) -> dict:
        with engine.begin() as conn:
            conn.execute(table.insert().values(id=thing_id))
        return {}

    with TestClient(app) as client:
        assert client.post("/things/1").status_code == 200
        again = client.post("/things/1")
    assert again.status_code == 409
    assert again.json()["detail"] == "conflict with stored data: UNIQUE constraint failed: things.id"
