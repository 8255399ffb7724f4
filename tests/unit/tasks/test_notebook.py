"""The notebook task's program: JupyterLab under the proxy prefix, opened by the secret alone, its
secret kept out of the logs, and stopped by its idle timeout."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.unit.tasks.conftest import StandInMaster, TaskProgram, run_task, start_program, task_answer


@pytest.fixture(scope="module")
def notebook(master: StandInMaster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskProgram]:
    context = tmp_path_factory.mktemp("notebook") / "context"
    context.mkdir()
    (context / "train.py").write_text("print('hi')\n")
    program = run_task("notebook", master, task_answer("notebook", 12), context)
    yield program
    assert program.stop() == 0, program.output


def request(url: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    method = "GET" if body is None else "POST"
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data, headers, method=method), timeout=30
        ) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None


def proxy_headers(secret: str) -> dict[str, str]:
    """What the master's proxy adds to each request it forwards to a notebook."""
    return {"X-Det-Task-Secret": secret, "Authorization": f"token {secret}"}


def execute(url: str, headers: dict[str, str], code: str) -> str:
    """Run ``code`` over the kernel's WebSocket channel; answers its result's text."""
    session, msg_id = uuid.uuid4().hex, uuid.uuid4().hex
    message = {
        "header": {
            "msg_id": msg_id,
            "session": session,
            "username": "",
            "msg_type": "execute_request",
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {}},
        "channel": "shell",
        "buffers": [],
    }
    with connect(url, additional_headers=headers, open_timeout=30) as websocket:
        websocket.send(json.dumps(message))
        while True:
            reply = json.loads(websocket.recv(timeout=60))
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if reply["msg_type"] == "execute_result":
                return str(reply["content"]["data"]["text/plain"])
            if reply["msg_type"] == "error":
                pytest.fail(f"the kernel failed: {reply['content']}")


def test_a_kernel_started_with_the_secret_runs_code(notebook: TaskProgram) -> None:
    headers = proxy_headers(notebook.secret)
    status, kernel = request(f"{notebook.base}api/kernels", headers, {"name": "python3"})
    assert status == 201, kernel

    channels = f"ws://127.0.0.1:{notebook.port}{notebook.prefix}api/kernels/{kernel['id']}/channels"
    assert execute(channels, headers, "1+1") == "2"
    # The kernel runs what its user types: the trial's token is not its to read.
    assert (
        execute(channels, headers, "__import__('os').environ.get('DET_SESSION_TOKEN', 'unset')") == "'unset'"
    )


def test_the_server_serves_the_working_directory_under_the_prefix(notebook: TaskProgram) -> None:
    status, listing = request(f"{notebook.base}api/contents", proxy_headers(notebook.secret))

    assert status == 200
    assert [item["name"] for item in listing["content"]] == ["train.py"]


@pytest.mark.parametrize("token", [None, "wrong-token-wrong-token-wrong-token"])
def test_a_request_without_the_secret_is_refused(notebook: TaskProgram, token: str | None) -> None:
    headers = {} if token is None else proxy_headers(token)

    assert request(f"{notebook.base}api/kernels", headers)[0] == 403
    assert request(f"{notebook.base}api/kernels", headers, {"name": "python3"})[0] == 403
    for socket in (f"api/kernels/{uuid.uuid4()}/channels", "terminals/websocket/1"):
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{notebook.port}{notebook.prefix}{socket}", additional_headers=headers)
        assert refused.value.response.status_code == 403


def test_the_ready_line_is_logged_and_the_secret_never_is(notebook: TaskProgram) -> None:
    # A failed request is logged with its URL, and Jupyter accepts the token in the URL too.
    assert request(f"{notebook.base}api/no-such-route?token={notebook.secret}", {})[0] == 404

    assert f"JupyterLab is ready at {notebook.prefix}lab" in notebook.output
    assert notebook.secret not in notebook.output


def test_an_idle_notebook_culls_its_kernel_stops_and_exits_0(master: StandInMaster, tmp_path: Path) -> None:
    program = run_task("notebook", master, task_answer("notebook", 13, idle=2), tmp_path / "context")
    status, kernel = request(f"{program.base}api/kernels", proxy_headers(program.secret), {"name": "python3"})
    assert status == 201, kernel

    assert program.wait(60) == 0, program.output
    assert re.search(f"Culling .*{kernel['id']}", program.output), program.output
    assert program.secret not in program.output


def test_a_task_of_another_type_ends_with_one_line(master: StandInMaster, tmp_path: Path) -> None:
    trial_id = master.add(task_answer("shell", 14))
    process = start_program("notebook", master, trial_id, tmp_path)

    assert process.wait(60) == 1
    output = (tmp_path.parent / f"notebook-{trial_id}.log").read_text().strip()
    assert output == "notebook: task 14 is a 'shell' task, not a 'notebook' one"
