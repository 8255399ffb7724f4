"""DetHook reads the master's address and det's service token from an Airflow connection, given
here as Airflow reads connections from the environment (AIRFLOW_CONN_<ID>), and its clients reach
that master with that token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from det_airflow.api._http import API_PREFIX
from det_airflow.operators.experiment import RegisterExperimentOperator
from det_airflow.operators.hooks import DetHook
from det_airflow.operators.trial import TrialOperator
from tests.http_stub import serve

TOKEN = "service-token"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = b"context bytes"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tiny_master() -> Iterator[str]:
    _Recorder.seen = []
    with serve(_Recorder) as url:
        yield url


def test_the_default_connection_given_in_the_environment_takes_the_client_to_its_master(
    tiny_master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = tiny_master.removeprefix("http://").split(":")
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT",
        json.dumps({"conn_type": "det", "host": host, "port": int(port), "password": TOKEN}),
    )
    client = DetHook().get_conn()
    try:
        assert client.context(3) == b"context bytes"
    finally:
        client.close()
    assert _Recorder.seen == [(f"{API_PREFIX}/internal/experiments/3/context", f"Bearer {TOKEN}")]


@pytest.mark.parametrize(
    ("uri", "master"),
    [
        ("det://:tok@master.example:9000", "http://master.example:9000"),
        (
            json.dumps({"conn_type": "det", "host": "https://m.example/air", "password": "tok"}),
            "https://m.example/air",
        ),
        (
            json.dumps({"conn_type": "http", "host": "http://127.0.0.1:8080", "password": "tok"}),
            "http://127.0.0.1:8080",
        ),
    ],
)
def test_the_master_url_is_the_connections_host_with_its_port(
    uri: str, master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DET_DEFAULT", uri)
    assert DetHook().credentials == (master, "tok")


def test_a_named_connection_is_read_instead_of_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DET_DEFAULT", "det://:default@default.example")
    monkeypatch.setenv("AIRFLOW_CONN_DET_TEAM", "det://:team@team.example:81")
    assert DetHook("det_team").credentials == ("http://team.example:81", "team")


def test_a_connection_without_a_token_names_the_command_that_makes_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DET_DEFAULT", "det://master.example:8080")
    with pytest.raises(
        ValueError, match="connection 'det_default' has no master address or token: run `det admin"
    ):
        DetHook().credentials  # noqa: B018


def test_credentials_a_trigger_carries_are_used_without_a_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_DET_DEFAULT", raising=False)
    client = DetHook(credentials=("http://m.example:8080", "tok")).get_async_conn()
    assert (client.master, client.token) == ("http://m.example:8080", "tok")


def test_det_operators_use_the_hooks_default_connection() -> None:
    operators = [
        RegisterExperimentOperator(task_id="register", config_path="const.yaml"),
        TrialOperator(task_id="trial", experiment_id=1, slot=0),
    ]
    assert {op.master_conn_id for op in operators} == {DetHook.default_conn_name}
