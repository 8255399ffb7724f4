"""`det user login|logout|whoami` and the token store."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from det_airflow.api import user as api_user

from .conftest import TOKEN


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
