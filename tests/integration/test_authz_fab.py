"""Who may do what, on a real Airflow with the FAB auth manager: its Viewer, User, Op and Admin
roles, users made with `airflow users create`, logins through FAB's own `POST /auth/token`.

The simple auth manager's run (test_authz.py) drives every route; this one drives a representative
set, to show that the same rules hold when FAB's roles and permissions decide. An admin is a user
FAB lets edit the configuration: its Admin role, not Op (which may only read it).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from det_airflow.localairflow import LocalAirflow, sqlite_url, write_config
from tests.integration.conftest import free_port
from tests.integration.det_env import DET, REPO, DetEnv, wait_until

pytestmark = pytest.mark.integration

API = "/det/api/v1"
FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
ROLES = {"viewer": "Viewer", "alice": "User", "bob": "User", "oscar": "Op"}
CONFIG = yaml.safe_dump(
    {
        "name": "fab",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
)


def _airflow_ok(af: LocalAirflow, *args: str) -> None:
    result = af.airflow(*args)
    assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def fab_airflow() -> Iterator[tuple[LocalAirflow, dict[str, str]]]:
    """An Airflow on SQLite whose users and roles live in FAB; answers it and ``{user: password}``."""
    pytest.importorskip("airflow.providers.fab", reason="apache-airflow-providers-fab is a dev dependency")
    base = Path(tempfile.mkdtemp(prefix="det-airflow-fab-"))
    af = write_config(
        base / "home",
        sql_alchemy_conn=sqlite_url(base / "home"),
        dags_folder=base / "dags",
        port=free_port(),
        extra={"core": {"auth_manager": FAB_AUTH_MANAGER}},
    )
    passwords = {af.admin_user: af.admin_password}
    passwords.update({name: secrets.token_urlsafe(12) for name in ROLES})
    try:
        af.migrate()
        _airflow_ok(af, "fab-db", "migrate")
        for name, role in {af.admin_user: "Admin", **ROLES}.items():
            _airflow_ok(
                af,
                # ``--password=`` keeps a random password that starts with "-" from reading as an option
                *("users", "create", "--username", name, f"--password={passwords[name]}", "--role", role),
                *("--firstname", name, "--lastname", role, "--email", f"{name}@example.com"),
            )
        af.start()
        af.wait_ready(timeout=300)
    except BaseException:
        tails = af.log_tails()
        af.stop()
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"the FAB Airflow did not start:\n{tails}", pytrace=False)
    try:
        yield af, passwords
    finally:
        af.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def det(fab_airflow: tuple[LocalAirflow, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> DetEnv:
    return DetEnv.install(fab_airflow[0], tmp_path_factory.mktemp("det-config-fab"))


@pytest.fixture(scope="module")
def tokens(det: DetEnv, fab_airflow: tuple[LocalAirflow, dict[str, str]]) -> dict[str, str]:
    """A JWT per user from `POST /auth/token`, which FAB's auth manager serves."""
    answer = {}
    for name, password in fab_airflow[1].items():
        r = httpx.post(f"{det.af.url}/auth/token", json={"username": name, "password": password}, timeout=30)
        assert r.status_code == 201, f"FAB login of {name}: {r.status_code} {r.text}"
        answer[name] = r.json()["access_token"]
    return answer


def call(
    det: DetEnv, who: str | None, tokens: dict[str, str], method: str, path: str, **kw: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {tokens[who]}"} if who is not None else {}
    with httpx.Client(base_url=det.af.url, timeout=60) as client:
        return client.request(method, API + path, headers=headers, **kw)


def create(det: DetEnv, who: str | None, tokens: dict[str, str]) -> httpx.Response:
    return call(det, who, tokens, "POST", "/experiments", json={"config": CONFIG, "paused": True})


@pytest.fixture(scope="module")
def owned(det: DetEnv, tokens: dict[str, str]) -> dict[str, int]:
    """A paused experiment of alice's and one of bob's (both Users)."""
    answer = {}
    for user in ("alice", "bob"):
        made = create(det, user, tokens)
        assert made.status_code == 200, made.text
        answer[user] = int(made.json()["experiment"]["id"])
    return answer


def state(det: DetEnv, tokens: dict[str, str], experiment_id: int) -> str:
    answer = call(det, "admin", tokens, "GET", f"/experiments/{experiment_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["experiment"]["state"])


def test_logins_come_from_fab(det: DetEnv, tokens: dict[str, str]) -> None:
    for who in ("admin", *ROLES):
        me = call(det, who, tokens, "GET", "/me")
        assert me.status_code == 200, me.text
        assert me.json()["username"] == who
    assert call(det, None, tokens, "GET", "/me").status_code == 401


def test_everyone_logged_in_reads_and_nobody_anonymous(
    det: DetEnv, tokens: dict[str, str], owned: dict[str, int]
) -> None:
    e = owned["alice"]
    for path in ("/experiments", f"/experiments/{e}", f"/experiments/{e}/config"):
        for who in ("viewer", "alice", "bob", "oscar", "admin"):
            assert call(det, who, tokens, "GET", path).status_code == 200, (who, path)
        assert call(det, None, tokens, "GET", path).status_code == 401, path

    # FAB answers which DAGs a user may read from Airflow's DAG table: an experiment is listed once
    # the DAG processor has parsed its DAG.
    def listed_for_viewer() -> bool:
        listed = call(det, "viewer", tokens, "GET", "/experiments").json()["experiments"]
        return e in {x["id"] for x in listed}

    wait_until(listed_for_viewer, f"experiment {e} in the Viewer's list", timeout=180)


def test_a_viewer_may_not_create_and_anonymous_must_log_in(det: DetEnv, tokens: dict[str, str]) -> None:
    refused = create(det, "viewer", tokens)
    assert refused.status_code == 403, refused.text
    assert "user 'viewer' may not" in refused.json()["detail"]
    assert create(det, None, tokens).status_code == 401


def test_only_the_owner_and_fab_admins_change_an_experiment(
    det: DetEnv, tokens: dict[str, str], owned: dict[str, int]
) -> None:
    alice, bob = owned["alice"], owned["bob"]
    changes = [
        ("POST", f"/experiments/{alice}/labels", {"label": "mine"}),
        ("PATCH", f"/experiments/{alice}", {"name": "taken over"}),
        ("POST", f"/experiments/{alice}/cancel", None),
        ("DELETE", f"/experiments/{alice}", None),
    ]
    for method, path, body in changes:
        assert call(det, None, tokens, method, path, json=body).status_code == 401, path
        # Op may edit every DAG in FAB, but is not an admin: only the owner's own experiments.
        for who in ("viewer", "bob", "oscar"):
            answer = call(det, who, tokens, method, path, json=body)
            assert answer.status_code == 403, (who, method, path, answer.text)
            assert f"user '{who}' may not" in answer.json()["detail"]
    assert state(det, tokens, alice) == "PAUSED"

    labelled = call(det, "alice", tokens, "POST", f"/experiments/{alice}/labels", json={"label": "mine"})
    assert labelled.status_code == 200, labelled.text
    assert "mine" in labelled.json()["experiment"]["labels"]
    assert call(det, "alice", tokens, "POST", f"/experiments/{alice}/cancel").status_code == 200
    assert state(det, tokens, alice) in ("STOPPING_CANCELED", "CANCELED")

    assert call(det, "alice", tokens, "POST", f"/experiments/{bob}/cancel").status_code == 403
    assert (
        call(det, "admin", tokens, "POST", f"/experiments/{bob}/labels", json={"label": "seen"}).status_code
        == 200
    )
    assert call(det, "admin", tokens, "POST", f"/experiments/{bob}/cancel").status_code == 200
    assert state(det, tokens, bob) in ("STOPPING_CANCELED", "CANCELED")


def airflow_call(
    det: DetEnv, who: str, tokens: dict[str, str], method: str, path: str, **kw: Any
) -> httpx.Response:
    """A call to Airflow's own REST API (not det's routes). This Airflow keeps its metadata in
    SQLite, one writer at a time: a write that finds the database locked by the scheduler or the
    DAG processor answers 500 "Database error", and is sent again (up to 5 times), as a client would."""
    with httpx.Client(base_url=det.af.url, timeout=60) as client:
        for _ in range(5):
            answer = client.request(
                method, "/api/v2" + path, headers={"Authorization": f"Bearer {tokens[who]}"}, **kw
            )
            if answer.status_code != 500 or "Database error" not in answer.text:
                return answer
            time.sleep(1)
        return answer


def test_airflow_own_api_lets_only_the_owner_and_admins_change_an_experiment_dag(
    det: DetEnv, tokens: dict[str, str]
) -> None:
    made = create(det, "alice", tokens)
    assert made.status_code == 200, made.text
    dag_id = made.json()["experiment"]["dag_id"]
    runs: list[dict[str, Any]] = []

    def has_trial_slots() -> bool:
        answer = airflow_call(det, "admin", tokens, "GET", f"/dags/{dag_id}/dagRuns")
        runs[:] = answer.json().get("dag_runs", []) if answer.status_code == 200 else []
        if not runs:
            return False
        tis = airflow_call(
            det, "admin", tokens, "GET", f"/dags/{dag_id}/dagRuns/{runs[0]['dag_run_id']}/taskInstances"
        )
        return tis.status_code == 200 and any(ti["task_id"] == "trial" for ti in tis.json()["task_instances"])

    wait_until(has_trial_slots, f"a run of {dag_id} with its trial slots", timeout=180)
    run_id = runs[0]["dag_run_id"]
    changes = [
        ("PATCH", f"/dags/{dag_id}", {"is_paused": True}),
        ("POST", f"/dags/{dag_id}/clearTaskInstances", {"dry_run": True, "task_ids": ["trial"]}),
        ("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/trial/0", {"new_state": "failed"}),
        ("DELETE", f"/dags/{dag_id}/dagRuns/{run_id}", None),
        ("DELETE", f"/dags/{dag_id}", None),
    ]
    for method, path, body in changes:
        for who in ("viewer", "bob"):
            answer = airflow_call(det, who, tokens, method, path, json=body)
            assert answer.status_code == 403, (who, method, path, answer.status_code, answer.text)
    # The owner still reads and changes it, through Airflow and through det.
    assert airflow_call(det, "bob", tokens, "GET", f"/dags/{dag_id}").status_code == 200
    for who in ("alice", "admin"):
        for paused in (True, False):
            answer = airflow_call(det, who, tokens, "PATCH", f"/dags/{dag_id}", json={"is_paused": paused})
            assert answer.status_code == 200, (who, answer.text)
            assert answer.json()["is_paused"] is paused
    e = made.json()["experiment"]["id"]
    assert (
        call(det, "alice", tokens, "POST", f"/experiments/{e}/labels", json={"label": "mine"}).status_code
        == 200
    )
    assert state(det, tokens, e) == "PAUSED"


def test_ownership_of_experiment_dags_survives_an_api_server_restart(
    det: DetEnv, fab_airflow: tuple[LocalAirflow, dict[str, str]], tokens: dict[str, str]
) -> None:
    """FAB gives the User role its default permissions back at every API-server start (``[fab]
    update_fab_perms``, true by default); the master takes DAG edits away again as it starts."""
    made = create(det, "alice", tokens)
    assert made.status_code == 200, made.text
    dag_id = made.json()["experiment"]["dag_id"]
    wait_until(
        lambda: airflow_call(det, "admin", tokens, "GET", f"/dags/{dag_id}").status_code == 200,
        f"{dag_id} in Airflow",
        timeout=180,
    )
    af = fab_airflow[0]
    pid = af.status()["api-server"]
    assert pid
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: af.status()["api-server"] is None, "the API server gone", timeout=60)
    af.start()
    af.wait_ready(timeout=300)

    for method, path, body in (
        ("PATCH", f"/dags/{dag_id}", {"is_paused": True}),
        ("DELETE", f"/dags/{dag_id}", None),
    ):
        answer = airflow_call(det, "bob", tokens, method, path, json=body)
        assert answer.status_code == 403, (method, path, answer.status_code, answer.text)
    answer = airflow_call(det, "alice", tokens, "PATCH", f"/dags/{dag_id}", json={"is_paused": True})
    assert answer.status_code == 200, answer.text


def test_the_cli_says_permission_denied_under_fab(
    det: DetEnv, fab_airflow: tuple[LocalAirflow, dict[str, str]], tokens: dict[str, str], tmp_path: Path
) -> None:
    made = create(det, "alice", tokens)
    assert made.status_code == 200, made.text
    e = made.json()["experiment"]["id"]
    env = {
        **det.env(),
        "DET_USER": "viewer",
        "DET_PASS": fab_airflow[1]["viewer"],
        "DET_AIRFLOW_CONFIG_DIR": str(tmp_path / "cli-viewer"),
    }
    result = subprocess.run(
        [str(DET), "experiment", "kill", str(e)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "permission denied: " in result.stderr
    assert "Traceback" not in result.stderr
    assert state(det, tokens, e) == "PAUSED"


def _det_as(
    det: DetEnv, who: str, password: str, tmp_path: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {
        **det.env(),
        "DET_USER": who,
        "DET_PASS": password,
        "DET_AIRFLOW_CONFIG_DIR": str(tmp_path / f"cli-{who}"),
    }
    return subprocess.run(
        [str(DET), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300, input=stdin
    )


def test_det_user_verbs_manage_fab_users(
    det: DetEnv, fab_airflow: tuple[LocalAirflow, dict[str, str]], tmp_path: Path
) -> None:
    passwords = fab_airflow[1]
    admin = det.af.admin_user

    created = _det_as(det, admin, passwords[admin], tmp_path, "user", "create", "dave", stdin="first-pass\n")
    assert created.returncode == 0, created.stderr
    assert created.stdout == "Created user 'dave' with Airflow role User\n"
    listed = _det_as(det, admin, passwords[admin], tmp_path, "user", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("|")[0].strip(): line for line in listed.stdout.splitlines()[2:]}
    assert {"dave", admin, "viewer"} <= set(rows)
    assert [cell.strip() for cell in rows["dave"].split("|")] == ["dave", "True", "False"]
    assert [cell.strip() for cell in rows[admin].split("|")][2] == "True"

    # dave logs in with the password given at creation, then the admin changes it.
    assert (
        _det_as(det, "dave", "first-pass", tmp_path, "user", "whoami").stdout
        == "You are logged in as user 'dave'\n"
    )
    changed = _det_as(
        det, admin, passwords[admin], tmp_path, "user", "change-password", "dave", stdin="second-pass\n"
    )
    assert changed.returncode == 0, changed.stderr
    old = httpx.post(
        f"{det.af.url}/auth/token", json={"username": "dave", "password": "first-pass"}, timeout=30
    )
    new = httpx.post(
        f"{det.af.url}/auth/token", json={"username": "dave", "password": "second-pass"}, timeout=30
    )
    assert (old.status_code, new.status_code) == (401, 201)

    # A Viewer may not manage users: refused before any password is asked for.
    refused = _det_as(det, "viewer", passwords["viewer"], tmp_path, "user", "create", "eve")
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: permission denied: "), refused.stderr
    assert "Traceback" not in refused.stderr
    deactivate = _det_as(det, admin, passwords[admin], tmp_path, "user", "deactivate", "dave")
    assert deactivate.returncode == 1
    assert "untick Is Active on the user's page under Security > List Users" in deactivate.stderr
