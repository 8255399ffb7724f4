"""A trial process's start: what `import det_airflow` and `core.init()` load, and the light HTTP
session a trial talks to the master through (the standard library's, not httpx)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from det_airflow.api._http import API_PREFIX, Session, TrialSession
from det_airflow.api.runtime import RuntimeClient
from det_airflow.errors import APIError
from det_airflow.trial_process import TrialSpec, trial_environment, write_trial_files

# What training code did not ask for and a trial must not load: the master's and the CLI's
# libraries, and the ML ones (training code that wants torch imports det_airflow.pytorch).
HEAVY = (
    "airflow",
    "fastapi",
    "httpx",
    "numpy",
    "optuna",
    "pydantic",
    "rich",
    "sqlalchemy",
    "tabulate",
    "torch",
    "yaml",
)
TOKEN = "trial-token"
SPEC = TrialSpec(
    trial_id=7,
    experiment_id=3,
    request_id="r-7",
    trial_seed=42,
    hparams={"lr": 0.1},
    config={
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "hyperparameters": {"lr": 0.1},
    },
)
# Reports what of HEAVY the process holds after the training code above it ran.
LOADED = f"import json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None
    body: Any


@dataclass
class TinyMaster:
    """A real HTTP server answering a trial's routes; ``answers`` maps (method, path) to (status, body)."""

    url: str
    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    close_after_answer: bool = False
    hang_up_on: set[tuple[str, str]] = field(default_factory=set)
    unavailable: dict[tuple[str, str], int] = field(default_factory=dict)  # this many 503s first
    closed: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def tiny_master() -> Iterator[TinyMaster]:
    master = TinyMaster(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps connections alive, as the real master does

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.removeprefix(API_PREFIX)
            master.seen.append(
                Seen(self.command, path, self.headers.get("Authorization"), json.loads(raw) if raw else None)
            )
            if (self.command, path) in master.hang_up_on:
                self.close_connection = True
                return
            status, body = master.answers.get((self.command, path), (200, {}))
            if master.unavailable.get((self.command, path), 0) > 0:
                master.unavailable[(self.command, path)] -= 1
                status, body = 503, {"detail": "the master's database is unavailable, try again"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = master.close_after_answer

        do_GET = do_POST = do_DELETE = _handle

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    class Server(ThreadingHTTPServer):
        def shutdown_request(self, request: Any) -> None:
            super().shutdown_request(request)
            master.closed.set()

    server = Server(("127.0.0.1", 0), Handler)
    master.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield master
    server.shutdown()
    server.server_close()


def run_trial_code(code: str, env: dict[str, str], cwd: Path) -> list[str]:
    """Run ``code`` in a fresh interpreter; answers the HEAVY modules it had loaded at the end."""
    done = subprocess.run(
        [sys.executable, "-c", code + LOADED], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"the trial code failed:\n{done.stderr}"
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_an_off_cluster_run_loads_nothing_heavy(tmp_path: Path) -> None:
    env = trial_environment(SPEC, local_store=tmp_path / "store", workdir=tmp_path)
    env = {k: v for k, v in env.items() if not k.startswith("DET_") or k == "DET_LOCAL_STORE"}
    code = (
        "import det_airflow as det\n"
        "with det.core.init() as ctx:\n"
        "    ctx.train.report_training_metrics(5, {'loss': 0.5})\n"
        "    with ctx.checkpoint.store_path({'steps_completed': 5}) as (path, uuid):\n"
        "        (path / 'w').write_text('1')\n"
        "    ctx.preempt.should_preempt()\n"
    )

    assert run_trial_code(code, env, tmp_path) == []
    assert list((tmp_path / "store").iterdir()), "the local store got nothing"


def test_init_on_a_trial_loads_nothing_heavy_before_its_first_request(tmp_path: Path) -> None:
    # Port 9 (discard) on loopback: nothing answers; init must not need the master.
    write_trial_files(SPEC, tmp_path)
    env = trial_environment(SPEC, master_url="http://127.0.0.1:9", token=TOKEN, workdir=tmp_path)

    assert run_trial_code("import det_airflow as det\ndet.core.init()\n", env, tmp_path) == []


def test_a_trial_talking_to_the_master_loads_nothing_heavy(tmp_path: Path, tiny_master: TinyMaster) -> None:
    tiny_master.answers[("GET", "/runtime/trials/7/preemption")] = (200, {"preempt": True})
    write_trial_files(SPEC, tmp_path)
    env = trial_environment(SPEC, master_url=tiny_master.url, token=TOKEN, workdir=tmp_path)
    code = (
        "import det_airflow as det\n"
        "with det.core.init() as ctx:\n"
        "    ctx.train.report_training_metrics(5, {'loss': 0.5})\n"
        "    assert ctx.preempt.should_preempt() is True\n"
    )

    assert run_trial_code(code, env, tmp_path) == []
    routes = [(s.method, s.path) for s in tiny_master.seen]
    assert ("GET", "/runtime/trials/7/preemption") in routes
    metrics = [s.body for s in tiny_master.seen if s.path == "/runtime/trials/7/metrics"]
    assert [r["metrics"] for batch in metrics for r in batch["reports"]] == [{"loss": 0.5}]
    assert {s.authorization for s in tiny_master.seen} == {f"Bearer {TOKEN}"}


def test_public_names_stay_importable_and_pytorch_loads_torch_only_when_asked(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import det_airflow as det\n"
        "from det_airflow import InvalidHP, core, get_cluster_info\n"
        "from det_airflow.core import Context, init\n"
        "assert 'torch' not in sys.modules, 'import det_airflow loaded torch'\n"
        "print(det.LOG_FORMAT and det.pytorch.__name__, det.get_cluster_info())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}

    # torch brings numpy; nothing else of HEAVY comes with the Trainer.
    assert run_trial_code(code, env, tmp_path) == ["numpy", "torch"]


def test_the_config_package_loads_the_yaml_reader_only_when_asked(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from det_airflow.config import Length, length_in_batches\n"
        "assert 'yaml' not in sys.modules, 'the Trainer\\'s config helpers loaded yaml'\n"
        "from det_airflow.config import parse_config\n"
        "print(parse_config('entrypoint: x\\nsearcher: {name: single, metric: loss}').searcher.name)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}

    assert run_trial_code(code, env, tmp_path) == ["yaml"]


def test_the_masters_message_reaches_the_trial(tiny_master: TinyMaster) -> None:
    tiny_master.answers[("GET", "/runtime/checkpoints/nope")] = (404, {"detail": "checkpoint nope not found"})
    client = RuntimeClient(tiny_master.url, TOKEN, 7)

    with pytest.raises(APIError, match="checkpoint nope not found") as info:
        client.get_checkpoint("nope")
    assert info.value.status_code == 404


def test_a_refused_trial_token_says_so(tiny_master: TinyMaster) -> None:
    tiny_master.answers[("GET", "/runtime/trials/7/preemption")] = (401, {"detail": "bad token"})

    with pytest.raises(APIError, match="refused this trial's token") as info:
        RuntimeClient(tiny_master.url, TOKEN, 7).should_preempt()
    assert info.value.status_code == 401


def test_an_unreachable_master_is_named() -> None:
    session = TrialSession("127.0.0.1:9", TOKEN, retry_seconds=0.0)

    with pytest.raises(APIError, match=r"cannot reach the master at http://127\.0\.0\.1:9"):
        session.get("/runtime/trials/7/preemption")


def test_a_connection_the_master_closed_while_idle_is_replaced(tiny_master: TinyMaster) -> None:
    tiny_master.close_after_answer = True  # as a keep-alive timeout would, between two reports
    tiny_master.answers[("GET", "/runtime/trials/7/best_validation")] = (200, {"metric": 0.25})
    client = RuntimeClient(tiny_master.url, TOKEN, 7)

    assert client.best_validation() == 0.25
    assert tiny_master.closed.wait(10), "the server never closed the first connection"
    assert client.best_validation() == 0.25
    assert len(tiny_master.seen) == 2


def test_a_master_that_hangs_up_is_tried_again_then_named(tiny_master: TinyMaster) -> None:
    tiny_master.hang_up_on.add(("POST", "/runtime/trials/7/metrics"))
    session = TrialSession(tiny_master.url, TOKEN, retry_seconds=0.5)
    client = RuntimeClient(None, None, 7, session=session)

    with pytest.raises(APIError, match=r"cannot reach the master at http://127\.0\.0\.1:\d+"):
        client.report_metrics([{"group": "training", "steps_completed": 1, "metrics": {"loss": 1.0}}])
    routes = {(s.method, s.path) for s in tiny_master.seen}
    assert routes == {("POST", "/runtime/trials/7/metrics")}
    assert len(tiny_master.seen) >= 2, "the dropped request was not tried again"


@pytest.mark.parametrize("kind", ["trial", "service"])
def test_a_master_whose_database_is_away_is_asked_again(tiny_master: TinyMaster, kind: str) -> None:
    route = ("POST", "/runtime/trials/7/metrics")
    tiny_master.unavailable[route] = 3
    tiny_master.answers[route] = (200, {"stored": 1})
    session = (
        TrialSession(tiny_master.url, TOKEN, retry_seconds=30)
        if kind == "trial"
        else Session(tiny_master.url, TOKEN, retry_seconds=30)
    )

    assert session.post("/runtime/trials/7/metrics", {"reports": []}) == {"stored": 1}
    assert [(s.method, s.path) for s in tiny_master.seen] == [route] * 4


@pytest.mark.parametrize("kind", ["trial", "service"])
def test_a_database_away_for_too_long_is_named(tiny_master: TinyMaster, kind: str) -> None:
    route = ("GET", "/runtime/trials/7/preemption")
    tiny_master.unavailable[route] = 1000
    session = (
        TrialSession(tiny_master.url, TOKEN, retry_seconds=0.5)
        if kind == "trial"
        else Session(tiny_master.url, TOKEN, retry_seconds=0.5)
    )

    with pytest.raises(APIError, match="database is unavailable") as info:
        session.get("/runtime/trials/7/preemption")
    assert info.value.status_code == 503
    assert len(tiny_master.seen) >= 2
