"""Who may do what, on a real Airflow with its simple auth manager: every people route driven as
anonymous, a Viewer, the owner (a User), another User, an Admin, a trial token of another trial
and the service token; a refused request changes nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from det_airflow.localairflow import PASSWORDS_FILE
from tests.integration.conftest import TEST_USERS
from tests.integration.det_env import DetEnv, wait_until

pytestmark = pytest.mark.integration

API = "/det/api/v1"
SECRET = "hunter2-not-for-viewers"

# Reports a checkpoint holding its own trial token (trial code can read it; the test uses it as
# "a trial token of another trial"), then runs until asked to stop.
TRAIN_PY = """
import os
import time

import det_airflow as det

with det.core.init() as core:
    core.train.report_validation_metrics(steps_completed=1, metrics={"loss": 0.5})
    with core.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
        (path / "token").write_text(os.environ["DET_SESSION_TOKEN"])
    while not core.preempt.should_preempt():
        time.sleep(0.5)
"""


@dataclass
class Running:
    """An experiment with one running trial that has reported a checkpoint."""

    experiment_id: int
    trial_id: int
    checkpoint: str
    checkpoint_path: Path
    trial_token: str


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


@pytest.fixture(scope="module")
def passwords(det: DetEnv) -> dict[str, str]:
    stored = json.loads((det.af.home / PASSWORDS_FILE).read_text())
    missing = set(TEST_USERS) - set(stored)
    assert not missing, f"Airflow wrote no password for {missing} into {PASSWORDS_FILE}"
    return {name: stored[name] for name in TEST_USERS}


@pytest.fixture(scope="module")
def tokens(det: DetEnv, passwords: dict[str, str]) -> dict[str, str]:
    """A JWT per user, from Airflow's `POST /auth/token`, plus the service token of `det_default`."""
    answer = {}
    for name, password in passwords.items():
        r = httpx.post(f"{det.af.url}/auth/token", json={"username": name, "password": password}, timeout=30)
        assert r.status_code in (200, 201), r.text
        answer[name] = r.json()["access_token"]
    conn = det.af.airflow("connections", "get", "det_default", "-o", "json")
    assert conn.returncode == 0, conn.stderr
    answer["service"] = json.loads(conn.stdout)[0]["password"]
    return answer


def run_det(
    det: DetEnv, user: str, password: str, config_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return det.as_user(user, password, config_dir).det(*args, check=False)


def call(
    det: DetEnv, who: str | None, tokens: dict[str, str], method: str, path: str, **kw: Any
) -> httpx.Response:
    headers = dict(kw.pop("headers", {}))
    if who is not None:
        headers["Authorization"] = f"Bearer {tokens[who]}"
    with httpx.Client(base_url=det.af.url, timeout=60) as client:
        return client.request(method, API + path, headers=headers, **kw)


def start_experiment(
    det: DetEnv, user: str, passwords: dict[str, str], tmp: Path, tokens: dict[str, str]
) -> Running:
    context = tmp / f"context-{user}"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = {
        "name": f"authz-{user}",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "environment": {"environment_variables": [f"API_KEY={SECRET}"]},
        "max_restarts": 0,
    }
    (tmp / f"{user}.yaml").write_text(yaml.safe_dump(config))
    made = run_det(
        det,
        user,
        passwords[user],
        tmp / f"cli-{user}",
        "experiment",
        "create",
        str(tmp / f"{user}.yaml"),
        str(context),
    )
    assert made.returncode == 0, made.stdout + made.stderr
    experiment_id = int(made.stdout.rsplit("Created experiment", 1)[1].split()[0])

    def checkpoint() -> dict[str, Any] | None:
        found = call(det, "admin", tokens, "GET", f"/experiments/{experiment_id}/checkpoints").json()
        return found["checkpoints"][0] if found["checkpoints"] else None

    ckpt = wait_until(checkpoint, f"a checkpoint of {user}'s experiment {experiment_id}", timeout=300)
    path = Path(ckpt["storage"]["path"])
    return Running(experiment_id, ckpt["trial_id"], ckpt["uuid"], path, (path / "token").read_text())


@pytest.fixture(scope="module")
def experiments(
    det: DetEnv, passwords: dict[str, str], tokens: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Running]]:
    tmp = tmp_path_factory.mktemp("authz")
    running = {user: start_experiment(det, user, passwords, tmp, tokens) for user in ("alice", "bob")}
    yield running
    for run in running.values():
        call(det, "admin", tokens, "POST", f"/experiments/{run.experiment_id}/kill")


def snapshot(det: DetEnv, tokens: dict[str, str], run: Running) -> tuple:
    exp = call(det, "admin", tokens, "GET", f"/experiments/{run.experiment_id}").json()
    ckpt = call(det, "admin", tokens, "GET", f"/checkpoints/{run.checkpoint}").json()["checkpoint"]
    trial = next(t for t in exp["trials"] if t["id"] == run.trial_id)
    e = exp["experiment"]
    return (
        e["state"],
        e["name"],
        e["description"],
        e["labels"],
        e["archived"],
        trial["state"],
        ckpt["state"],
    )


READS = [
    "/experiments",
    "/experiments/{e}",
    "/experiments/{e}/config",
    "/experiments/{e}/trials",
    "/experiments/{e}/checkpoints",
    "/trials/{t}",
    "/trials/{t}/metrics",
    "/trials/{t}/logs",
    "/checkpoints/{c}",
    "/me",
]
# The context's files may hold what the owner did not mean to show (keys beside the code).
OWNER_READS = ["/experiments/{e}/context"]

CHANGES = [
    ("POST", "/experiments/{e}/pause", None),
    ("POST", "/experiments/{e}/cancel", None),
    ("POST", "/experiments/{e}/kill", None),
    ("POST", "/experiments/{e}/archive", None),
    ("POST", "/experiments/{e}/labels", {"label": "mine"}),
    ("DELETE", "/experiments/{e}/labels/mine", None),
    ("PATCH", "/experiments/{e}", {"name": "taken over"}),
    ("POST", "/trials/{t}/kill", None),
    ("DELETE", "/checkpoints/{c}", None),
    ("DELETE", "/experiments/{e}", None),
]


def _fill(path: str, run: Running) -> str:
    return path.format(e=run.experiment_id, t=run.trial_id, c=run.checkpoint)


def test_every_read_route_needs_a_person_who_may_read_the_dag(
    det: DetEnv, tokens: dict[str, str], experiments: dict[str, Running]
) -> None:
    alice, bob = experiments["alice"], experiments["bob"]
    tokens = {**tokens, "bob-trial": bob.trial_token}
    for path in READS:
        url = _fill(path, alice)
        for who in ("viewer", "alice", "bob", "admin"):
            assert call(det, who, tokens, "GET", url).status_code == 200, (who, url)
        assert call(det, None, tokens, "GET", url).status_code == 401, url
        assert call(det, "bob-trial", tokens, "GET", url).status_code == 403, url
        assert call(det, "service", tokens, "GET", url).status_code == 403, url
    for path in OWNER_READS:
        url = _fill(path, alice)
        for who, status in (("viewer", 403), ("bob", 403), ("alice", 200), ("admin", 200)):
            assert call(det, who, tokens, "GET", url).status_code == status, (who, url)
        assert call(det, None, tokens, "GET", url).status_code == 401, url
        assert call(det, "bob-trial", tokens, "GET", url).status_code == 403, url


def test_every_change_is_refused_to_all_but_the_owner_and_admins_and_changes_nothing(
    det: DetEnv, tokens: dict[str, str], experiments: dict[str, Running]
) -> None:
    alice, bob = experiments["alice"], experiments["bob"]
    tokens = {**tokens, "bob-trial": bob.trial_token}
    before = snapshot(det, tokens, alice)
    for method, path, body in CHANGES:
        url = _fill(path, alice)
        for who, status in [(None, 401), ("viewer", 403), ("bob", 403), ("bob-trial", 403), ("service", 403)]:
            answer = call(det, who, tokens, method, url, json=body)
            assert answer.status_code == status, (who, method, url, answer.text)
            if who in ("viewer", "bob"):
                assert f"user '{who}' may not" in answer.json()["detail"]
                assert f"experiment {alice.experiment_id}" in answer.json()["detail"]
    assert snapshot(det, tokens, alice) == before


def test_a_trial_token_works_only_for_its_own_trial(
    det: DetEnv, tokens: dict[str, str], experiments: dict[str, Running]
) -> None:
    alice, bob = experiments["alice"], experiments["bob"]
    with httpx.Client(base_url=det.af.url, timeout=60) as client:
        headers = {"Authorization": f"Bearer {bob.trial_token}"}
        own = client.get(f"{API}/runtime/trials/{bob.trial_id}/preemption", headers=headers)
        other = client.get(f"{API}/runtime/trials/{alice.trial_id}/preemption", headers=headers)
        internal = client.get(f"{API}/internal/trials/{alice.trial_id}", headers=headers)
    assert own.status_code == 200
    assert other.status_code == 403
    assert internal.status_code == 403


def test_the_owner_and_admins_label_rename_and_see_secrets(
    det: DetEnv, tokens: dict[str, str], experiments: dict[str, Running]
) -> None:
    alice = experiments["alice"]
    e = alice.experiment_id
    assert (
        call(det, "alice", tokens, "POST", f"/experiments/{e}/labels", json={"label": "v1"}).status_code
        == 200
    )
    assert (
        call(det, "admin", tokens, "POST", f"/experiments/{e}/labels", json={"label": "ok"}).status_code
        == 200
    )
    renamed = call(
        det, "alice", tokens, "PATCH", f"/experiments/{e}", json={"name": "mnist", "description": "d"}
    )
    assert renamed.json()["experiment"]["name"] == "mnist"
    removed = call(det, "alice", tokens, "DELETE", f"/experiments/{e}/labels/v1").json()["experiment"]
    assert removed["labels"] == ["ok"]
    too_long = call(det, "alice", tokens, "PATCH", f"/experiments/{e}", json={"name": "x" * 257})
    assert too_long.status_code == 422

    for who in ("alice", "admin"):
        config = call(det, who, tokens, "GET", f"/experiments/{e}/config").json()["config"]
        assert config["environment"]["environment_variables"]["cpu"] == [f"API_KEY={SECRET}"]
    for who in ("viewer", "bob"):
        described = call(det, who, tokens, "GET", f"/experiments/{e}").json()
        assert described["config"]["environment"]["environment_variables"]["cpu"] == ["API_KEY=********"]
        assert SECRET not in json.dumps(described)


def test_cross_site_changes_are_refused(
    det: DetEnv, tokens: dict[str, str], experiments: dict[str, Running]
) -> None:
    alice = experiments["alice"]
    before = snapshot(det, tokens, alice)
    cookie = {"_token": tokens["alice"]}
    url = f"{det.af.url}{API}/experiments/{alice.experiment_id}/cancel"
    with httpx.Client(cookies=cookie, timeout=60) as browser:
        form = browser.post(url, data={"x": "1"}, headers={"Origin": "https://evil.example"})
        form_same_origin = browser.post(url, data={"x": "1"})
        cross_json = browser.post(url, json={}, headers={"Origin": "https://evil.example"})
        cross_fetch = browser.post(url, json={}, headers={"Sec-Fetch-Site": "cross-site"})
    assert form.status_code in (403, 415)
    assert form_same_origin.status_code == 415
    assert cross_json.status_code == 403
    assert cross_fetch.status_code == 403
    assert snapshot(det, tokens, alice) == before


def test_the_api_document_needs_a_login(det: DetEnv, tokens: dict[str, str]) -> None:
    with httpx.Client(base_url=det.af.url, timeout=60) as client:
        assert client.get("/det/openapi.json").status_code == 401
        logged_in = client.get("/det/openapi.json", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert logged_in.status_code == 200
    assert f"{API.removeprefix('/det')}/experiments" in logged_in.json()["paths"]


def test_a_viewer_cannot_create_an_experiment_from_the_cli(
    det: DetEnv, passwords: dict[str, str], tokens: dict[str, str], tmp_path: Path
) -> None:
    before = call(det, "admin", tokens, "GET", "/experiments?all=true").json()["experiments"]
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = tmp_path / "viewer.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "entrypoint": "python3 train.py",
                "searcher": {"name": "single", "metric": "loss", "max_length": 1},
            }
        )
    )
    made = run_det(
        det,
        "viewer",
        passwords["viewer"],
        tmp_path / "cli",
        "experiment",
        "create",
        str(config),
        str(context),
    )
    assert made.returncode == 1
    assert made.stderr.strip().splitlines()[-1] == (
        "Error: permission denied: user 'viewer' may not create experiments: needs the right to create DAG runs"
    )
    assert "Traceback" not in made.stderr
    assert call(det, "admin", tokens, "GET", "/experiments?all=true").json()["experiments"] == before


def test_the_owner_kills_a_trial_then_deletes_its_checkpoint_and_the_experiment(
    det: DetEnv,
    passwords: dict[str, str],
    tokens: dict[str, str],
    experiments: dict[str, Running],
    tmp_path: Path,
) -> None:
    alice = experiments["alice"]
    latest = call(det, "alice", tokens, "DELETE", f"/checkpoints/{alice.checkpoint}")
    assert latest.status_code == 409, latest.text
    assert (alice.checkpoint_path / "token").exists()

    killed = call(det, "alice", tokens, "POST", f"/trials/{alice.trial_id}/kill")
    assert killed.status_code == 200, killed.text
    wait_until(
        lambda: (
            call(det, "alice", tokens, "GET", f"/trials/{alice.trial_id}").json()["trial"]["state"]
            == "CANCELED"
        ),
        f"trial {alice.trial_id} CANCELED after `kill`",
    )
    assert call(det, "alice", tokens, "DELETE", f"/checkpoints/{alice.checkpoint}").status_code == 200
    # The master removes the folder in the background, as alice's identity (no worker host reports).
    wait_until(lambda: not alice.checkpoint_path.exists(), f"checkpoint {alice.checkpoint}'s folder removed")
    assert call(det, "viewer", tokens, "GET", f"/checkpoints/{alice.checkpoint}").json()["checkpoint"][
        "state"
    ] == ("DELETED")

    e = alice.experiment_id
    ended = wait_until(
        lambda: (
            call(det, "admin", tokens, "GET", f"/experiments/{e}").json()["experiment"]["state"]
            in ("COMPLETED", "CANCELED", "ERROR")
        ),
        f"experiment {e} ended after its only trial was killed",
        timeout=300,
    )
    assert ended
    refused = run_det(
        det, "bob", passwords["bob"], tmp_path / "cli-bob", "experiment", "delete", str(e), "--yes"
    )
    assert refused.returncode == 1
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"Error: permission denied: user 'bob' may not delete experiment {e}: it belongs to 'alice'"
        )
    )
    assert call(det, "admin", tokens, "GET", f"/experiments/{e}").status_code == 200
    det.wait_dag_run(call(det, "admin", tokens, "GET", f"/experiments/{e}").json()["experiment"])
    deleted = run_det(
        det, "alice", passwords["alice"], tmp_path / "cli-alice", "experiment", "delete", str(e), "--yes"
    )
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert call(det, "admin", tokens, "GET", f"/experiments/{e}").status_code == 404


def test_bob_cancels_his_own_experiment(
    det: DetEnv, tokens: dict[str, str], experiments: dict[str, Running]
) -> None:
    bob = experiments["bob"]
    assert call(det, "bob", tokens, "POST", f"/experiments/{bob.experiment_id}/cancel").status_code == 200
    wait_until(
        lambda: (
            call(det, "bob", tokens, "GET", f"/experiments/{bob.experiment_id}").json()["experiment"]["state"]
            == "CANCELED"
        ),
        f"bob's experiment {bob.experiment_id} CANCELED",
        timeout=300,
    )
