"""The people's client reads the master's answers as the wire models; an answer it cannot read is
an APIError naming the route and the field, not a traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from det_airflow.api._http import API_PREFIX
from det_airflow.api.user import UserClient
from det_airflow.errors import APIError
from det_airflow.states import ExperimentState

EXPERIMENT = {
    "id": 3,
    "name": "mnist",
    "owner": "alice",
    "description": None,
    "labels": ["a"],
    "state": "ACTIVE",
    "progress": 0.5,
    "start_time": "2025-03-01T12:00:00+00:00",
    "end_time": None,
    "parent_id": None,
    "resource_pool": "default",
    "searcher": "single",
    "searcher_metric": "loss",
    "best_validation": 0.25,
    "archived": False,
    "dag_id": "det_experiment_3",
    "dag_run_id": None,
    "error": None,
    "num_trials": 1,
}


@pytest.fixture
def answers() -> Iterator[tuple[str, dict[str, Any]]]:
    """A server that answers every GET with the JSON the test puts in the dict."""
    given: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            data = json.dumps(given.get(self.path.removeprefix(API_PREFIX), {})).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", given
    server.shutdown()
    server.server_close()


def test_an_answer_is_read_as_its_model(answers: tuple[str, dict[str, Any]]) -> None:
    url, given = answers
    given["/experiments"] = {"experiments": [EXPERIMENT]}

    (experiment,) = UserClient(url, "t").list_experiments()

    assert (experiment.id, experiment.state, experiment.labels) == (3, ExperimentState.ACTIVE, ["a"])


def test_an_answer_the_client_cannot_read_names_route_and_field(answers: tuple[str, dict[str, Any]]) -> None:
    url, given = answers
    given["/experiments"] = {"experiments": [{**EXPERIMENT, "state": "SLEEPING"}]}

    with pytest.raises(
        APIError, match=r"answered /experiments with .* as ExperimentList \(experiments\.0\.state"
    ):
        UserClient(url, "t").list_experiments()
