"""A pod's init container unpacks the experiment's context: its script, run as the pod would run it
(the command and environment of the init container we submit), against the master's app reached
over HTTP with the trial's own token."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from det_airflow.api._http import API_PREFIX
from det_airflow.config import config_to_dict, parse_config
from det_airflow.master import schema
from det_airflow.master.auth import hash_token
from det_airflow.operators.runners import ContainerTrial
from det_airflow.operators.runners.kubernetes_pod import (
    CONTEXT_CONTAINER,
    secret_name,
    trial_pod,
    trial_secret,
)
from det_airflow.trial_process import TrialSpec, trial_environment
from tests.unit.master.creating import Creator, b64, creator, tar_gz  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401

TOKEN = "trial-token"
CONFIG = "name: tiny\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 10}\n"


class MasterOverHttp:
    """The master's app behind a real socket at ``/det``, as Airflow's API server mounts it."""

    def __init__(self, app: People, *, bind: str = "127.0.0.1") -> None:

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def _forward(self, method: str) -> None:
                path = self.path.removeprefix("/det")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {"Authorization": self.headers.get("Authorization", "")}
                if body:
                    headers["Content-Type"] = self.headers.get("Content-Type", "application/json")
                answer = app.client.request(method, path, headers=headers, content=body or None)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((bind, 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> MasterOverHttp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def add_trial(app: People, experiment_id: int) -> int:
    with app.db.begin() as conn:
        result = conn.execute(
            schema.trials.insert().values(
                experiment_id=experiment_id, request_id=1, state="RUNNING", hparams={}, trial_seed=1,
                summary={}, run_id=1, token_hash=hash_token(TOKEN),
            )
        )  # fmt: skip
    return int(result.inserted_primary_key[0])


@pytest.fixture
def master(creator: Creator) -> Iterator[tuple[MasterOverHttp, int]]:  # noqa: F811
    context = tar_gz({"train.py": b"print('training')\n", "pkg/model.py": b"LAYERS = 3\n"})
    # Created paused, so its search has made no trial: the test adds its own.
    answer = creator.create(config=CONFIG, context=b64(context), paused=True)
    experiment_id = answer.json()["experiment"]["id"]
    with MasterOverHttp(creator.people) as server:
        yield server, add_trial(creator.people, experiment_id)


def run_init_container(
    workdir: Path, master_url: str, trial_id: int, token: str
) -> subprocess.CompletedProcess[str]:
    """Runs the init container of the pod we would submit: its command, with its environment (the
    variables it reads from the run's Secret as Kubernetes would give them)."""
    config = config_to_dict(parse_config(CONFIG))
    spec = TrialSpec(
        trial_id=trial_id, experiment_id=1, request_id="1", trial_seed=1, config=config, run_id=1
    )
    env = trial_environment(spec, master_url=master_url, token=token, base_env={}, workdir=workdir)
    trial = ContainerTrial(spec=spec, workdir=workdir, argv=("python3", "train.py"), env=env)
    api = ApiClient()
    name = secret_name(trial)
    pod = api.sanitize_for_serialization(trial_pod(trial, namespace="ml", secret=name))
    secret = api.sanitize_for_serialization(trial_secret(trial, namespace="ml", name=name))
    (init,) = pod["spec"]["initContainers"]
    assert init["name"] == CONTEXT_CONTAINER
    command = [
        sys.executable if init["command"][0] == "python3" else init["command"][0],
        *init["command"][1:],
    ]
    return subprocess.run(
        command,
        env={e["name"]: _value(e, secret) for e in init["env"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _value(variable: dict[str, Any], secret: dict[str, Any]) -> str:
    if "value" in variable:
        return str(variable["value"])
    ref = variable["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    return str(secret["stringData"][ref["key"]])


def test_the_context_and_config_land_in_the_work_folder(
    master: tuple[MasterOverHttp, int], tmp_path: Path
) -> None:
    server, trial_id = master
    workdir = tmp_path / "work"
    workdir.mkdir()

    done = run_init_container(workdir, server.url, trial_id, TOKEN)

    assert done.returncode == 0, done.stderr
    assert (workdir / "train.py").read_text() == "print('training')\n"
    assert (workdir / "pkg" / "model.py").read_text() == "LAYERS = 3\n"
    written = (workdir / ".det" / "experiment_config.json").read_text()
    assert '"name": "tiny"' in written
    assert (workdir / ".det" / "home").is_dir() and (workdir / ".det" / "tmp").is_dir()


def test_another_trials_token_is_refused_and_the_pod_says_why(
    master: tuple[MasterOverHttp, int], tmp_path: Path
) -> None:
    server, trial_id = master
    done = run_init_container(tmp_path, server.url, trial_id, "someone-elses-token")
    assert done.returncode == 1
    assert (
        f"cannot fetch the experiment's context from the master at {server.url}: HTTP Error 403"
        in done.stderr
    )
    assert not (tmp_path / "train.py").exists()


def test_the_runtime_route_answers_the_context_to_the_trials_token_only(
    master: tuple[MasterOverHttp, int],
    creator: Creator,  # noqa: F811
) -> None:
    _, trial_id = master
    path = f"{API_PREFIX.removeprefix('/det')}/runtime/trials/{trial_id}/context"
    answer = creator.people.client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/gzip"
    refused = creator.people.client.get(path, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 403


def test_a_context_member_that_leaves_the_work_folder_is_refused(
    master: tuple[MasterOverHttp, int],
    creator: Creator,  # noqa: F811
    tmp_path: Path,
) -> None:
    server, trial_id = master
    with creator.people.db.begin() as conn:
        conn.execute(schema.experiments.update().values(context=tar_gz({"../escaped.txt": b"x"})))
    workdir = tmp_path / "work"
    workdir.mkdir()

    done = run_init_container(workdir, server.url, trial_id, TOKEN)

    assert done.returncode != 0
    assert "outside the destination" in done.stderr
    assert not (tmp_path / "escaped.txt").exists()
