"""Determined's daily verbs and flags for scripts: ``-u``, job ``-p/-w``, comma IDs, ``--limit`` /
``--offset``, log time windows, ``--best``, ``version``, ``master``, ``download-model-def``,
``trial download``, ``continue``, and the verbs Airflow answers for (tokens, users)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.cli.conftest import CAROL_TOKEN, CHECKPOINT_UUID, TOKEN, FakeMaster


def test_help_lists_nouns_in_determineds_order(det: Any) -> None:
    out = det("--help")
    assert out.code == 0
    # argparse prints --help on stdout.
    text = out.out
    # Determined sorts by its spelling of each noun: "command cmd" comes before "c|heckpoint".
    order = ["agent", "command", "checkpoint", "experiment", "job", "master", "template", "trial", "user"]
    positions = [text.index(f"    {noun}") for noun in order]
    assert positions == sorted(positions)
    assert "version" in text and "token" in text


def test_user_flag_uses_that_users_stored_token(det: Any, master: FakeMaster) -> None:
    from det_airflow.api.user import store_user_token

    store_user_token(master.url, "carol", CAROL_TOKEN)
    assert det("-u", "carol", "user", "whoami").out.strip() == "You are logged in as user 'carol'"
    # The stored login is unchanged: without -u, det is still admin.
    assert det("user", "whoami").out.strip() == "You are logged in as user 'admin'"


def test_user_flag_logs_in_from_det_pass(
    det: Any, master: FakeMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "carol")
    monkeypatch.setenv("DET_PASS", "carol-pw")
    assert "'carol'" in det("-u", "carol", "user", "whoami").out
    monkeypatch.delenv("DET_PASS")
    assert "'carol'" in det("-u", "carol", "user", "whoami").out  # the token was kept


def test_user_flag_without_a_login_says_how(det: Any, master: FakeMaster) -> None:
    result = det("-u", "carol", "e", "list")
    assert result.code == 1
    assert "no login stored for user 'carol'" in result.err
    assert "Traceback" not in result.err


def test_job_update_short_flags(det: Any, master: FakeMaster) -> None:
    # The stand-in master has no queue route: the request reaching it proves parsing passed.
    for flag, value in (("-p", "10"), ("-w", "2")):
        result = det("job", "update", "2", flag, value)
        assert "unrecognized arguments" not in result.err and "expected" not in result.err
    assert "expected a priority 1-99" in det("job", "update", "2", "-p", "0").err


def test_describe_takes_comma_separated_ids(det: Any, master: FakeMaster) -> None:
    result = det("e", "describe", "1,2", "--csv")
    assert result.code == 0
    experiment_rows = [line for line in result.out.splitlines() if line.startswith(("1,", "2,"))]
    assert [row.split(",")[0] for row in experiment_rows][:2] == ["1", "2"]
    docs = json.loads(det("e", "describe", "1,2", "--json").out)
    assert [d["experiment"]["id"] for d in docs] == [1, 2]
    single = json.loads(det("e", "describe", "1", "--json").out)
    assert single["experiment"]["id"] == 1
    bad = det("e", "describe", "1,x")
    assert bad.code == 2 and "expected comma-separated IDs such as 1,2, got '1,x'" in bad.err


def test_list_limit_and_offset(det: Any, master: FakeMaster) -> None:
    ids = [
        e["id"] for e in json.loads(det("e", "list", "--all", "--json", "--offset", "1", "--limit", "1").out)
    ]
    assert ids == [2]
    trials = json.loads(det("e", "lt", "1", "--json", "--limit", "1").out)
    assert [t["id"] for t in trials] == [10]
    assert det("e", "list", "--offset", "-1").code == 2


def test_trial_logs_time_window(det: Any, master: FakeMaster) -> None:
    # Lines 1..5 of trial 10 are logged at 12:00:01 .. 12:00:05.
    out = det(
        "t",
        "logs",
        "10",
        "--timestamp-after",
        "2025-03-01T12:00:02Z",
        "--timestamp-before",
        "2025-03-01T12:00:05Z",
    ).out
    assert [line.split("||")[1].strip() for line in out.splitlines()] == [
        "INFO: epoch 1",
        "WARNING: warning here",
    ]
    # The master applies the window: det sends it in every request instead of filtering here.
    assert master.log_queries and all(q["timestamp_before"] is not None for q in master.log_queries)
    tail = det("t", "logs", "10", "--tail", "1", "--timestamp-before", "2025-03-01T12:00:03").out
    assert tail.count("\n") == 1 and "12:00:02" in tail
    offset = det("t", "logs", "10", "--head", "1", "--timestamp-after", "2025-03-01T14:00:03+02:00").out
    assert "12:00:04" in offset and offset.count("\n") == 1
    bad = det("t", "logs", "10", "--timestamp-after", "yesterday")
    assert bad.code == 2 and "expected a time such as 2025-03-01T12:00:00Z" in bad.err


def test_list_checkpoints_best(det: Any, master: FakeMaster) -> None:
    worse = dict(master.checkpoints[CHECKPOINT_UUID], uuid="worse-1", validation_metric=2.0, trial_id=11)
    master.checkpoints["worse-1"] = worse
    best = json.loads(det("e", "list-checkpoints", "1", "--best", "1", "--json").out)
    assert [c["uuid"] for c in best] == [CHECKPOINT_UUID]  # smaller is better by default: 0.9 < 2.0
    master.configs[1]["searcher"]["smaller_is_better"] = False
    best = json.loads(det("e", "list-checkpoints", "1", "--best", "1", "--json").out)
    assert [c["uuid"] for c in best] == ["worse-1"]


def test_version_and_master_info(det: Any, master: FakeMaster) -> None:
    out = det("version").out
    assert out.startswith("client:\n  version: ")
    assert f"master_address: {master.url}" in out
    info = json.loads(det("master", "info", "--json").out)
    assert info["master_address"] == master.url and info["user"] == "admin"
    refused = det("master", "config")
    assert refused.code == 1 and "airflow.cfg" in refused.err


def test_download_model_def(det: Any, master: FakeMaster, tmp_path: Path) -> None:
    # The stand-in master's contexts are empty: det says so instead of writing an empty archive.
    out = tmp_path / "out"
    out.mkdir()
    result = det("e", "download-model-def", "1", "--output-dir", str(out))
    assert result.code == 1 and "without a context" in result.err
    assert not list(out.iterdir())
    missing = det("e", "download-model-def", "1", "--output-dir", str(tmp_path / "nope"))
    assert missing.code == 1 and "no such folder" in missing.err


def test_trial_download_latest_copies_the_checkpoint(det: Any, master: FakeMaster, tmp_path: Path) -> None:
    source = tmp_path / "storage"
    (source / "state").mkdir(parents=True)
    (source / "model.pt").write_bytes(b"m" * 2048)
    (source / "state" / "optimizer.pt").write_bytes(b"o" * 1024)
    master.checkpoints[CHECKPOINT_UUID]["storage"]["path"] = str(source)
    target = tmp_path / "out"
    result = det("t", "download", "10", "--latest", "-o", str(target), "-q")
    assert result.code == 0, result.err
    assert result.out.strip() == str(target)
    assert (target / "model.pt").read_bytes() == b"m" * 2048
    assert det("t", "download", "10", "--best", "-o", str(tmp_path / "b")).code == 0
    none = det("t", "download", "11", "--latest")
    assert none.code == 1 and "trial 11 has no completed checkpoint" in none.err
    assert det("t", "download", "10").code == 2  # one of --best, --latest, --uuid


def test_checkpoint_download_modes(det: Any, master: FakeMaster, tmp_path: Path) -> None:
    result = det("checkpoint", "download", CHECKPOINT_UUID, "--mode", "master", "-o", str(tmp_path / "x"))
    assert result.code == 1 and "use --mode direct or auto" in result.err
    assert det("c", "download", CHECKPOINT_UUID, "--mode", "sideways").code == 2


def test_continue_creates_a_warm_started_experiment(det: Any, master: FakeMaster) -> None:
    master.trials[11]["experiment_id"] = 3  # experiment 1 keeps one trial
    master.trials[10]["latest_checkpoint"] = CHECKPOINT_UUID
    master.configs[1] = {
        "name": "exp-1",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    }
    result = det("e", "continue", "1", "--config", "searcher.max_length.batches=2000")
    assert result.code == 0, result.err
    assert "Continuing trial 10 of experiment 1 as experiment 4" in result.out
    import yaml

    config = yaml.safe_load(master.created[-1]["config"])
    assert config["searcher"]["source_trial_id"] == 10
    assert config["searcher"]["max_length"] == {"batches": 2000}
    running = det("e", "continue", "2")
    assert running.code == 1 and "only a finished experiment can be continued" in running.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["token", "list"], "Airflow keeps no list of the tokens"),
        (["token", "describe", "3"], "Airflow keeps no list of the tokens"),
        (["user", "activate", "bob"], "users are Airflow's"),
        (["user", "rename", "bob", "rob"], "simple_auth_manager_users"),
        (["u", "edit", "bob", "--active", "false"], "users are Airflow's"),
    ],
)
def test_verbs_airflow_answers_for_are_refused_in_one_line(
    det: Any, master: FakeMaster, args: list[str], message: str
) -> None:
    result = det(*args)
    assert result.code == 1
    assert message in result.err
    assert result.err.count("\n") == 1


def test_token_create_prints_the_logins_token(det: Any, master: FakeMaster) -> None:
    assert det("token", "create").out.strip() == TOKEN
    other = det("token", "create", "carol")
    assert other.code == 1 and "det -u carol token create" in other.err
