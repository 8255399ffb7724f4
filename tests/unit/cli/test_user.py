"""`det user login|logout|whoami` and the token store."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from det_airflow.api import user as api_user

from .conftest import CAROL_TOKEN, STALE_TOKEN, TOKEN


@pytest.fixture
def logged_out(master: Any) -> Any:
    api_user.forget_login(master.url)
    return master


def _stored(config_dir: Path) -> dict[str, Any]:
    return json.loads((config_dir / "auth.json").read_text())


def test_login_stores_the_token_0600(
    det: Any, logged_out: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("getpass.getpass", lambda prompt: "s3cret")
    result = det("user", "login", "admin")
    assert result.code == 0, result.err
    path = cli_env / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _stored(cli_env) == {logged_out.url: {"username": "admin", "token": TOKEN}}
    assert det("user", "whoami").out == "You are logged in as user 'admin'\n"


def test_login_user_and_password_from_env(
    det: Any, logged_out: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", "s3cret")
    monkeypatch.setattr("getpass.getpass", lambda prompt: pytest.fail("asked for a password"))
    assert det("user", "login").code == 0
    assert _stored(cli_env)[logged_out.url]["username"] == "admin"


def test_login_wrong_password(
    det: Any, logged_out: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("getpass.getpass", lambda prompt: "wrong")
    result = det("user", "login", "admin")
    assert result.code == 1
    assert "invalid username or password" in result.err
    assert not (cli_env / "auth.json").exists() or logged_out.url not in _stored(cli_env)


def test_logout_forgets_only_this_master(det: Any, master: Any, cli_env: Path) -> None:
    api_user.store_login("other:8080", "bob", "t2")
    assert det("user", "logout").code == 0
    assert _stored(cli_env) == {"http://other:8080": {"username": "bob", "token": "t2"}}
    result = det("user", "whoami")
    assert result.code == 1
    assert "not logged in" in result.err


def test_env_credentials_log_in_automatically(
    det: Any, logged_out: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", "s3cret")
    assert det("e", "list").code == 0
    assert _stored(cli_env)[logged_out.url]["token"] == TOKEN


def test_expired_token_is_renewed_from_env(
    det: Any, master: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_user.store_login(master.url, "admin", "expired")
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", "s3cret")
    assert det("e", "list").code == 0
    assert master.seen_auth == ["Bearer expired", f"Bearer {TOKEN}"]
    assert _stored(cli_env)[master.url]["token"] == TOKEN


def test_config_dir_default_is_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DET_AIRFLOW_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert api_user.auth_file() == tmp_path / ".det-airflow" / "auth.json"


def test_damaged_auth_file_means_logged_out(cli_env: Path) -> None:
    cli_env.mkdir(parents=True)
    (cli_env / "auth.json").write_text("{not json")
    assert api_user.load_login("localhost:8080") is None
    api_user.store_login("localhost:8080", "admin", "t")
    assert api_user.load_login("http://localhost:8080/") == api_user.StoredLogin("admin", "t")


# --- a login the master no longer accepts (Airflow restarted with a new JWT secret) ---------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_refused_token_is_renewed_from_env_once(
    det: Any, master: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_user.store_login(master.url, "admin", STALE_TOKEN)
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", "s3cret")
    result = det("e", "list")
    assert result.code == 0, result.err
    assert master.seen_auth == [f"Bearer {STALE_TOKEN}", f"Bearer {TOKEN}"]
    assert _stored(cli_env)[master.url]["token"] == TOKEN
    master.seen_auth.clear()
    assert det("e", "list").code == 0
    assert master.seen_auth == [f"Bearer {TOKEN}"]  # the renewed token is used from then on


def test_refused_token_with_wrong_env_password_is_one_error(
    det: Any, master: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_user.store_login(master.url, "admin", STALE_TOKEN)
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", "wrong")
    result = det("e", "list")
    assert result.code == 1
    assert (
        result.err == f"Error: login to {master.url} failed for user 'admin': invalid username or password\n"
    )


def test_refused_token_asks_for_the_password_on_a_terminal(
    det: Any, master: Any, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_user.store_login(master.url, "admin", STALE_TOKEN)
    prompts: list[str] = []
    monkeypatch.setattr("sys.stdin", _Tty())
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or "s3cret")
    assert det("e", "pause", "2").out == "Paused experiment 2\n"
    assert prompts == ["Password for user 'admin': "]
    assert master.actions == [("pause", 2)]
    assert _stored(cli_env)[master.url]["token"] == TOKEN


def test_refused_token_without_a_terminal_asks_nothing(
    det: Any, master: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_user.store_login(master.url, "admin", STALE_TOKEN)
    monkeypatch.setattr("sys.stdin", io.StringIO())
    monkeypatch.setattr("getpass.getpass", lambda prompt: pytest.fail("asked for a password"))
    result = det("e", "list")
    assert result.code == 1
    assert result.err == (
        f"Error: the master at {master.url} refused the stored login (Invalid JWT token): "
        "run `det user login`, or set DET_USER and DET_PASS\n"
    )
    assert master.seen_auth == [f"Bearer {STALE_TOKEN}"]


# --- Determined's user verbs ----------------------------------------------------------------------


def test_user_list_shows_the_logged_in_user(det: Any, master: Any) -> None:
    api_user.store_login(master.url, "carol", CAROL_TOKEN)
    result = det("user", "list")
    assert result.code == 0, result.err
    assert result.out == " Username   | Active\n------------+----------\n carol      | True\n"
    assert "[core] simple_auth_manager_users" in result.err


@pytest.mark.parametrize(
    ("argv", "instead"),
    [
        (["create", "dave"], "add NAME:ROLE to [core] simple_auth_manager_users in airflow.cfg"),
        (["create", "dave", "--admin"], "add NAME:ROLE to [core] simple_auth_manager_users in airflow.cfg"),
        (["change-password", "dave"], "[core] simple_auth_manager_passwords_file"),
        (["change-password"], "[core] simple_auth_manager_passwords_file"),
        (["deactivate", "dave"], "remove the user from [core] simple_auth_manager_users"),
    ],
)
def test_user_changes_are_airflows(det: Any, master: Any, argv: list[str], instead: str) -> None:
    result = det("user", *argv)
    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith(f"Error: det user {argv[0]}: users are Airflow's, not det's; ")
    assert instead in result.err
    assert len(result.err.splitlines()) == 1
