"""The `det` entry point: parsing, aliases, master address, and how errors reach the user."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.api import _http
from det_airflow.api import user as api_user
from det_airflow.errors import ConfigError

from .conftest import TOKEN


def test_help_lists_the_nouns(det: Any) -> None:
    result = det("--help")
    assert result.code == 0
    for noun in ("experiment (e)", "trial (t)", "user"):
        assert noun in result.out


def test_missing_or_unknown_command_is_a_usage_error(det: Any) -> None:
    assert det().code == 2
    assert det("frobnicate").code == 2
    result = det("e")
    assert result.code == 2
    assert "usage:" in result.err


def test_bad_argument_type_is_a_usage_error(det: Any) -> None:
    result = det("e", "config", "not-a-number")
    assert result.code == 2
    assert "invalid int value" in result.err


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["user", "whoami"], {}, "http://localhost:8080"),
        (["user", "whoami"], {"DET_MASTER": "master.example:9000"}, "http://master.example:9000"),
        (
            ["-m", "https://det.example/", "user", "whoami"],
            {"DET_MASTER": "ignored:1"},
            "https://det.example",
        ),
        (["--master", "10.0.0.1:8080", "user", "whoami"], {}, "http://10.0.0.1:8080"),
    ],
)
def test_master_address_from_flag_env_or_default(
    det: Any,
    cli_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen = []

    class Client:
        def whoami(self) -> str:
            return "admin"

    def connect(master: str, **kwargs: Any) -> Client:
        seen.append(master)
        return Client()

    monkeypatch.setattr(api_user, "connect", connect)
    result = det(*argv)
    assert result.code == 0, result.err
    assert seen == [expected]


def test_unreachable_master_is_one_error_line(
    det: Any, cli_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http, "DEFAULT_RETRY_SECONDS", 0.0)
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        result = det("-m", f"127.0.0.1:{port}", "e", "list")
    assert result.code == 1
    assert result.err.startswith(f"Error: cannot reach the master at http://127.0.0.1:{port}")
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_not_found_from_the_master(det: Any, master: Any) -> None:
    result = det("e", "describe", "999")
    assert result.code == 1
    assert result.err == "Error: experiment 999 not found\n"


def test_conflict_from_the_master(det: Any, master: Any) -> None:
    result = det("e", "activate", "1")
    assert result.code == 1
    assert result.err == "Error: experiment 1 is COMPLETED; cannot activate it\n"


def test_not_logged_in(det: Any, master: Any) -> None:
    api_user.forget_login(master.url)
    result = det("e", "list")
    assert result.code == 1
    assert "not logged in" in result.err
    assert "det user login" in result.err
    assert master.seen_auth == [None]


def test_config_error_lists_each_problem_on_its_own_line(det: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(args: Any) -> None:
        raise ConfigError(
            [("searcher.max_trials", "expected an integer >= 1"), ("name", "expected a string")],
            source="const.yaml",
        )

    from det_airflow.cli import experiment

    monkeypatch.setattr(experiment, "_list", fail)  # main builds its parser on each call
    result = det("e", "list")
    assert result.code == 1
    assert result.err.splitlines() == [
        "Error: the experiment configuration in const.yaml has 2 problems:",
        "  searcher.max_trials: expected an integer >= 1",
        "  name: expected a string",
    ]


def test_ctrl_c_exits_130_quietly(det: Any, master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(api_user.UserClient, "list_experiments", interrupted)
    result = det("e", "list")
    assert result.code == 130
    assert result.err == ""


def test_stored_token_is_sent(det: Any, master: Any) -> None:
    assert det("e", "list").code == 0
    assert master.seen_auth == [f"Bearer {TOKEN}"]
