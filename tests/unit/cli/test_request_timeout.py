"""DET_REQUEST_TIMEOUT: how long `det` waits for the master's answer (default 30 s), against the
master's own routes served on loopback, behind a proxy that answers late where a test needs a slow
master. A bad value is one line and exit 1 before anything is sent; following output is unchanged."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from det_airflow.api._http import request_timeout
from det_airflow.api.user import store_login
from det_airflow.errors import DetError
from tests.unit.cli.conftest import run_det_script
from tests.unit.cli.test_task_verbs import Cluster, _joined, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here

DELAY_SECONDS = 2.0  # how late the slow master answers


class _LateProxy(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the master after ``DELAY_SECONDS``, as a master behind a slow link."""

    upstream = ""

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        time.sleep(DELAY_SECONDS)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        with httpx.Client(base_url=self.upstream) as client:
            answer = client.request(self.command, self.path, content=body, headers=headers)
        try:
            self.send_response(answer.status_code)
            self.send_header("content-type", answer.headers.get("content-type", "application/json"))
            self.send_header("content-length", str(len(answer.content)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(answer.content)
        except OSError:  # the client stopped waiting: nobody to answer
            pass

    do_GET = do_POST = do_DELETE = do_PATCH = _forward


class _LateServer(http.server.ThreadingHTTPServer):
    # Closing waits for the answers still on their way, so none outlives the master it forwards to.
    daemon_threads = False


@pytest.fixture
def slow_master(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The master behind a proxy that answers ``DELAY_SECONDS`` late, as $DET_MASTER, logged in as alice."""
    handler = type("Proxy", (_LateProxy,), {"upstream": cluster.url})
    server = _LateServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    store_login(url, "alice", "alice-token")
    monkeypatch.setenv("DET_MASTER", url)
    yield url
    server.shutdown()
    server.server_close()


def test_a_short_timeout_gives_up_on_a_slow_master_with_one_line(
    det: Any, slow_master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_REQUEST_TIMEOUT", "0.5")
    result = det("workspace", "list")
    assert (result.code, result.out, result.err) == (
        1,
        "",
        f"Error: the master at {slow_master} did not answer in time\n",
    )


@pytest.mark.parametrize("value", [None, "10"])
def test_the_default_or_a_longer_timeout_waits_for_a_slow_master(
    det: Any, slow_master: str, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("DET_REQUEST_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("DET_REQUEST_TIMEOUT", value)
    result = det("workspace", "list")
    assert (result.code, result.err) == (0, ""), result.err
    assert [row[1] for row in _table(result.out)[1]] == ["Uncategorized"]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, 30.0),
        ("", 30.0),
        ("  ", 30.0),
        ("10", 10.0),
        (" 10.5 ", 10.5),
        ("0.01", 0.01),
        ("86400", 86400.0),
    ],
)
def test_the_value_read(monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float) -> None:
    if value is None:
        monkeypatch.delenv("DET_REQUEST_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("DET_REQUEST_TIMEOUT", value)
    assert request_timeout() == seconds


BAD = ["0", "-5", "abc", "30s", "nan", "inf", "-inf", "1e12", "86401", "1_0x"]


def _refusal(value: str) -> str:
    return (
        f"Error: DET_REQUEST_TIMEOUT={value!r}: expected a number of seconds above 0 and at most 86400, "
        "such as DET_REQUEST_TIMEOUT=120\n"
    )


@pytest.mark.parametrize("value", BAD)
def test_a_bad_value_is_one_line_and_exit_1(
    det: Any, cli_env: Any, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("DET_REQUEST_TIMEOUT", value)
    monkeypatch.setenv("DET_MASTER", "http://127.0.0.1:9")
    # `det version` included: it reports an unreachable master and goes on, but this is no such thing.
    for argv in (["workspace", "list"], ["version"], ["user", "login", "alice"]):
        result = det(*argv)
        assert (result.code, result.out, result.err) == (1, "", _refusal(value)), argv
    with pytest.raises(DetError) as refused:
        request_timeout()
    assert f"{refused.value}\n" == _refusal(value).removeprefix("Error: ")


def test_a_bad_value_sends_nothing(det: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_REQUEST_TIMEOUT", "30s")
    made = det("cmd", "run", "-d", "echo", "hi")
    assert (made.code, made.out, made.err) == (1, "", _refusal("30s"))
    assert cluster.task_ids() == [], "nothing was created"
    monkeypatch.setenv("DET_REQUEST_TIMEOUT", "30")
    assert det("cmd", "run", "-d", "echo", "hi").out == "Launched command 1\n"


@pytest.mark.parametrize("value", ["0", "abc"])
def test_the_installed_det_says_a_bad_value_without_a_traceback(tmp_path: Any, value: str) -> None:
    result = run_det_script(
        "e",
        "list",
        env={
            "DET_REQUEST_TIMEOUT": value,
            "DET_MASTER": "http://127.0.0.1:9",
            "DET_AIRFLOW_CONFIG_DIR": str(tmp_path),
        },
    )
    assert (result.code, result.out, result.err) == (1, "", _refusal(value))


def test_following_output_lasts_longer_than_the_timeout(
    det: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout is each answer's, not the command's: `det cmd run` follows a command whose output
    comes over longer than it, polling as it always did. The timeout is 4 s, not less: on a loaded
    machine the create itself (a DAG written to Airflow) has taken more than 1 s."""
    monkeypatch.setenv("DET_REQUEST_TIMEOUT", "4")

    def runner(task_id: int) -> None:
        trial_id = cluster.start(task_id)
        cluster.log(trial_id, "hello")
        time.sleep(9)  # more than twice the timeout
        cluster.log(trial_id, "bye")
        cluster.exit(trial_id, 0)

    thread = cluster.in_background(runner)
    result = det("cmd", "run", "echo", "hello")
    _joined(thread)
    assert (result.code, result.err) == (0, "")
    lines = result.out.splitlines()
    assert lines[0] == "Launched command 1"
    assert [line.rsplit("|| INFO: ", 1)[1] for line in lines[1:]] == ["hello", "bye"]
