"""On a task's host name the API server serves that task's pages and nothing of Airflow's."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from det_airflow.webui.task_hosts import OnlyTheTaskOnItsHost


def _airflow() -> Starlette:
    async def anything(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"served {request.url.path}")

    return Starlette(routes=[Route("/{path:path}", anything)])


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://127.0.0.1:8080")  # a master on loopback
    monkeypatch.delenv("AIRFLOW__DET__TASK_PROXY_HOST", raising=False)
    return TestClient(OnlyTheTaskOnItsHost(_airflow()))


@pytest.mark.parametrize("path", ["/", "/auth/login", "/api/v2/dags", "/det/api/v1/me", "/det/proxy/8/lab"])
def test_a_task_host_serves_nothing_but_its_own_task(client: TestClient, path: str) -> None:
    answer = client.get(path, headers={"Host": "task-7.localhost:8080"})
    assert answer.status_code == 404
    assert "serves only that task's pages" in answer.text


def test_a_task_host_serves_its_task_and_other_hosts_everything(client: TestClient) -> None:
    assert (
        client.get("/det/proxy/7/lab", headers={"Host": "task-7.localhost:8080"}).text
        == "served /det/proxy/7/lab"
    )
    assert client.get("/api/v2/dags", headers={"Host": "127.0.0.1:8080"}).text == "served /api/v2/dags"
    # A name like a task's, outside the tasks' domain, is not one.
    assert client.get("/", headers={"Host": "task-7.example.com"}).status_code == 200
