"""`det` against the real master: Airflow's own API server (SQLite, simple auth manager) with the
det plugin, so lifecycle rules, permissions and wording are the master's, not a stand-in's.

Users: ``admin`` (Admin), ``carol`` (User: may create and change her own experiments) and ``vic``
(Viewer: may only read).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from det_airflow.api import user as api_user
from det_airflow.localairflow import AIRFLOW_BIN, PASSWORDS_FILE, LocalAirflow, sqlite_url, write_config

from .conftest import _free_port

PASSWORDS = {"carol": "carol-pw", "vic": "vic-pw"}
CONFIG = """\
name: lifecycle
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""
START_TIMEOUT = 300.0


@dataclass
class RealMaster:
    af: LocalAirflow
    config: Path

    @property
    def url(self) -> str:
        return self.af.url

    def password(self, user: str) -> str:
        return self.af.admin_password if user == "admin" else PASSWORDS[user]

    def set_state(self, experiment_id: int, state: str) -> None:
        """Put an experiment in a state no trial will drive it to here (there is no scheduler)."""
        from det_airflow.master import schema
        from det_airflow.master.db import Database

        with Database(sqlite_url(self.af.home)).begin() as conn:
            table = schema.experiments
            conn.execute(table.update().where(table.c.id == experiment_id).values(state=state))


def _wait_for_api(af: LocalAirflow, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            if httpx.get(f"{af.url}/api/v2/monitor/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        log = af.log_file("api-server")
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"the Airflow API server at {af.url} did not come up within {START_TIMEOUT:.0f} s "
                f"(exit {proc.poll()}); log {log}:\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.5)


@pytest.fixture(scope="module")
def real_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealMaster]:
    home = tmp_path_factory.mktemp("airflow")
    af = write_config(
        home,
        sql_alchemy_conn=sqlite_url(home),
        dags_folder=home / "dags",
        port=_free_port(),
        parallelism=2,
        extra={"core": {"simple_auth_manager_users": "admin:admin,carol:user,vic:viewer"}},
    )
    passwords = json.loads((home / PASSWORDS_FILE).read_text())
    (home / PASSWORDS_FILE).write_text(json.dumps(passwords | PASSWORDS))
    af.migrate()
    from det_airflow.master.db import Database

    Database(sqlite_url(home)).migrate()
    af.log_dir.mkdir(exist_ok=True)
    with af.log_file("api-server").open("wb") as log:
        proc = subprocess.Popen(
            [str(AIRFLOW_BIN), "api-server", "--host", "127.0.0.1", "--port", str(af.port)],
            env=af.env(),
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_api(af, proc)
        config = home / "const.yaml"
        config.write_text(CONFIG)
        yield RealMaster(af, config)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def as_user(real_master: RealMaster, cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``as_user(name)``: the CLI logged in to the real master as that user."""
    monkeypatch.setenv("DET_MASTER", real_master.url)

    def log_in(user: str) -> None:
        token = api_user.login(real_master.url, user, real_master.password(user))
        api_user.store_login(real_master.url, user, token)

    return log_in


def _create(det: Any, real_master: RealMaster) -> int:
    result = det("e", "create", str(real_master.config))
    assert result.code == 0, result.err
    return int(result.out.strip().removeprefix("Created experiment "))


def _state(det: Any, experiment_id: int) -> tuple[str, str]:
    """(State, Archived) as `det e describe` shows them."""
    table = det("e", "describe", str(experiment_id)).out.split("\n\nTrials:")[0]
    header_line, _, row_line = table.removeprefix("Experiment:\n").splitlines()[:3]
    cells = (c.strip() for c in row_line.split("|"))
    row = dict(zip((c.strip() for c in header_line.split("|")), cells, strict=True))
    return row["State"], row["Archived"]


def test_lifecycle_of_an_experiment(det: Any, real_master: RealMaster, as_user: Any) -> None:
    as_user("carol")
    n = _create(det, real_master)
    assert _state(det, n) == ("ACTIVE", "False")

    for verb, refusal in [
        ("archive", f"experiment {n} is ACTIVE; only finished experiments can be archived"),
        ("activate", None),  # already active: nothing to do
        ("delete", f"experiment {n} is ACTIVE; cancel or kill it before deleting it"),
    ]:
        result = det("e", verb, str(n), *(["--yes"] if verb == "delete" else []))
        if refusal is None:
            assert (result.code, result.out) == (0, f"Activated experiment {n}\n")
        else:
            assert (result.code, result.err) == (1, f"Error: {refusal}\n")
    assert _state(det, n) == ("ACTIVE", "False")

    assert det("e", "pause", str(n)).out == f"Paused experiment {n}\n"
    assert _state(det, n) == ("PAUSED", "False")
    assert det("e", "activate", str(n)).out == f"Activated experiment {n}\n"
    assert _state(det, n) == ("ACTIVE", "False")
    assert det("e", "cancel", str(n)).out == f"Canceled experiment {n}\n"
    assert _state(det, n) == ("CANCELED", "False")  # no trial was running: it ends at once

    result = det("e", "activate", str(n))
    assert (result.code, result.err) == (1, f"Error: experiment {n} is CANCELED; cannot activate it\n")
    result = det("e", "pause", str(n))
    assert (result.code, result.err) == (1, f"Error: experiment {n} is CANCELED; cannot pause it\n")

    assert det("e", "archive", str(n)).out == f"Archived experiment {n}\n"
    assert _state(det, n) == ("CANCELED", "True")
    assert str(n) not in [line.split("|")[0].strip() for line in det("e", "list").out.splitlines()]
    assert det("e", "unarchive", str(n)).out == f"Unarchived experiment {n}\n"
    assert _state(det, n) == ("CANCELED", "False")

    # Every change of state, with the verb that made it; refused verbs and archiving change none.
    table = det("e", "describe", str(n), "--states").out.split("\n\nState changes:\n")[1]
    header, _, *rows = table.splitlines()
    assert [c.strip() for c in header.split("|")] == ["Time", "From", "To", "Reason"]
    assert [[c.strip() for c in row.split("|")][1:] for row in rows] == [
        ["", "ACTIVE", "created by carol"],
        ["ACTIVE", "PAUSED", "det experiment pause"],
        ["PAUSED", "ACTIVE", "det experiment activate"],
        ["ACTIVE", "STOPPING_CANCELED", "det experiment cancel"],
        ["STOPPING_CANCELED", "CANCELED", "its search and every trial ended"],
    ]
    as_json = json.loads(det("e", "describe", str(n), "--states", "--json").out)
    assert [c["to"] for c in as_json["state_changes"]][-1] == "CANCELED"

    deleted = det("e", "delete", str(n), "--yes").out.splitlines()
    assert deleted[0] == f"Deleted experiment {n}"
    # Its trial work folder goes in the background, on the host its trials ran on.
    assert deleted[1:] == [
        "Removing in the background: its TensorBoard files (shared_fs); "
        f"the trial work directory on {socket.gethostname()}"
    ]
    result = det("e", "describe", str(n))
    assert (result.code, result.err) == (1, f"Error: experiment {n} not found\n")


def test_kill_and_finished_experiments(det: Any, real_master: RealMaster, as_user: Any) -> None:
    as_user("carol")
    n = _create(det, real_master)
    assert det("e", "kill", str(n)).out == f"Killed experiment {n}\n"
    state, _ = _state(det, n)
    result = det("e", "cancel", str(n))
    assert (result.code, result.err) == (1, f"Error: experiment {n} is {state}; cannot cancel it\n")

    done = _create(det, real_master)
    real_master.set_state(done, "COMPLETED")
    result = det("e", "activate", str(done))
    assert (result.code, result.err) == (1, f"Error: experiment {done} is COMPLETED; cannot activate it\n")
    assert det("e", "archive", str(done)).out == f"Archived experiment {done}\n"


def test_labels_name_and_description(det: Any, real_master: RealMaster, as_user: Any) -> None:
    as_user("carol")
    n = _create(det, real_master)
    assert det("e", "label", "add", str(n), "baseline").out == f"Added label 'baseline' to experiment {n}\n"
    assert det("e", "label", "add", str(n), "team/vision").code == 0
    assert det("e", "label", "remove", str(n), "team/vision").out == (
        f"Removed label 'team/vision' from experiment {n}\n"
    )
    assert det("e", "set", "name", str(n), "renamed").out == f"Set name of experiment {n} to 'renamed'\n"
    assert det("e", "set", "description", str(n), "take 2").out == (
        f"Set description of experiment {n} to 'take 2'\n"
    )
    shown = json.loads(det("e", "describe", str(n), "--json").out)["experiment"]
    assert (shown["labels"], shown["name"], shown["description"]) == (["baseline"], "renamed", "take 2")
    result = det("e", "label", "add", str(n), "bad\x1b[2Jlabel")
    assert result.code == 1
    assert result.err.startswith("Error: body.label: String should match pattern")
    assert "\x1b" not in result.err


def test_permission_denied(det: Any, real_master: RealMaster, as_user: Any) -> None:
    as_user("admin")
    n = _create(det, real_master)
    as_user("carol")
    result = det("e", "pause", str(n))
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"Error: permission denied: user 'carol' may not pause experiment {n}: it belongs to 'admin'; "
        "only its owner or an admin may change it\n"
    )
    as_user("vic")
    assert str(n) in [line.split("|")[0].strip() for line in det("e", "list").out.splitlines()]
    for argv, action in [
        (["e", "pause", str(n)], "pause"),
        (["e", "label", "add", str(n), "x"], "label"),
        (["e", "set", "name", str(n), "x"], "edit"),
    ]:
        result = det(*argv)
        assert result.err == (
            f"Error: permission denied: user 'vic' may not {action} experiment {n}: "
            f"needs edit access to DAG 'det_exp_{n}'\n"
        )
    result = det("e", "create", str(real_master.config))
    assert result.err == (
        "Error: permission denied: user 'vic' may not create experiments: needs the right to create DAG runs\n"
    )
    as_user("admin")
    assert _state(det, n) == ("ACTIVE", "False")


def test_user_list_under_the_simple_auth_manager_says_where_users_are(
    det: Any, real_master: RealMaster, as_user: Any
) -> None:
    """Airflow answers an unknown path with its web UI's page: that is no user list, and no error."""
    as_user("carol")
    result = det("user", "list")
    assert result.code == 0, result.err
    assert "carol" in result.out
    assert "[core] simple_auth_manager_users" in result.err
    assert "JSON" not in result.err


def test_create_with_the_same_request_id_makes_one_experiment(real_master: RealMaster, as_user: Any) -> None:
    as_user("carol")
    client = api_user.connect(real_master.url)
    first = client.create_experiment(CONFIG, None, request_id="retry-me-1")
    again = client.create_experiment(CONFIG, None, request_id="retry-me-1")
    assert again.id == first.id
    other = client.create_experiment(CONFIG, None, request_id="retry-me-2")
    assert other.id != first.id


def test_token_refused_after_a_new_jwt_secret_is_renewed_from_env(
    det: Any, real_master: RealMaster, as_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jwt

    # What a token from before an Airflow restart with a new [api_auth] jwt_secret looks like.
    old_secret = secrets.token_urlsafe(64)
    stale = jwt.encode({"sub": "carol", "exp": int(time.time()) + 3600}, old_secret, algorithm="HS512")
    api_user.store_login(real_master.url, "carol", stale)
    result = det("e", "list")
    assert result.code == 1
    assert result.err == (
        f"Error: the master at {real_master.url} refused the stored login (Invalid JWT token): "
        "run `det user login`, or set DET_USER and DET_PASS\n"
    )
    monkeypatch.setenv("DET_USER", "carol")
    monkeypatch.setenv("DET_PASS", PASSWORDS["carol"])
    assert det("e", "list").code == 0
    assert det("user", "whoami").out == "You are logged in as user 'carol'\n"
    assert api_user.load_login(real_master.url).token != stale  # type: ignore[union-attr]


def test_logout_revokes_the_token_through_airflows_logout(
    det: Any, real_master: RealMaster, as_user: Any
) -> None:
    as_user("carol")
    token = api_user.load_login(real_master.url).token  # type: ignore[union-attr]
    me = f"{real_master.url}/det/api/v1/me"
    assert httpx.get(me, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    result = det("user", "logout")
    assert result.code == 0, result.err
    assert result.err == ""
    assert api_user.load_login(real_master.url) is None
    # A copy of the token, kept anywhere, no longer works: not on det's API, not on Airflow's.
    assert httpx.get(me, headers={"Authorization": f"Bearer {token}"}).json() == {
        "detail": "Invalid JWT token"
    }
    dags = f"{real_master.url}/api/v2/dags"
    assert httpx.get(dags, headers={"Authorization": f"Bearer {token}"}).json() == {
        "detail": "Invalid JWT token"
    }


def test_token_revoke_takes_the_token_and_the_master_refuses_it_after(
    det: Any, real_master: RealMaster, as_user: Any
) -> None:
    as_user("carol")
    other = api_user.login(real_master.url, "carol", real_master.password("carol"))
    me = f"{real_master.url}/det/api/v1/me"
    result = det("token", "revoke", other)
    assert (result.code, result.out, result.err) == (0, "Token revoked\n", "")
    assert httpx.get(me, headers={"Authorization": f"Bearer {other}"}).status_code == 403
    # The stored login is another token of carol's: it still works.
    assert det("user", "whoami").out == "You are logged in as user 'carol'\n"
    again = det("token", "revoke", other)
    assert (again.code, again.err) == (
        1,
        "Error: det token revoke: the master does not accept this token (expired, or not its own)\n",
    )
