"""`det experiment ...` against the stand-in master: create, list, describe, follow, lifecycle."""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

CONFIG = """\
# a comment that survives when no --config is given
name: mnist
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a presto table."""
    lines = text.rstrip("\n").splitlines()
    header = [cell.strip() for cell in lines[0].split("|")]
    assert set(lines[1]) <= {"-", "+"}
    return header, [[cell.strip() for cell in line.split("|")] for line in lines[2:]]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "code" / "model.py").write_text("x = 1\n")
    (tmp_path / "extra.txt").write_text("more\n")
    (tmp_path / "const.yaml").write_text(CONFIG)
    return tmp_path


# --- list ------------------------------------------------------------------------------------------


def test_list_columns_and_rows(det: Any, master: Any) -> None:
    result = det("e", "list")
    assert result.code == 0, result.err
    header, rows = _table(result.out)
    assert header == [
        "ID",
        "Owner",
        "Name",
        "Parent ID",
        "State",
        "Progress",
        "Started",
        "Ended",
        "Resource Pool",
    ]
    assert [row[0] for row in rows] == ["1", "2"]  # archived 3 left out
    assert rows[0] == [
        "1",
        "admin",
        "exp-1",
        "",
        "COMPLETED",
        "100.0%",
        "2025-03-01 12:00:00+0000",
        "2025-03-01 13:30:00+0000",
        "default",
    ]
    assert rows[1][1:6] == ["bob", "search", "1", "ACTIVE", "25.0%"]


def test_list_aliases_and_all(det: Any, master: Any) -> None:
    result = det("experiment", "ls", "--all")
    header, rows = _table(result.out)
    assert header[-1] == "Archived"
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert rows[2][-1] == "True"


def test_list_csv(det: Any, master: Any) -> None:
    result = det("e", "ls", "--csv")
    lines = result.out.splitlines()
    assert lines[0] == "ID,Owner,Name,Parent ID,State,Progress,Started,Ended,Resource Pool"
    assert (
        lines[1]
        == "1,admin,exp-1,,COMPLETED,100.0%,2025-03-01 12:00:00+0000,2025-03-01 13:30:00+0000,default"
    )


def test_list_json(det: Any, master: Any) -> None:
    data = json.loads(det("e", "ls", "--json").out)
    assert [e["id"] for e in data] == [1, 2]
    assert data[0]["state"] == "COMPLETED"


def test_list_trials(det: Any, master: Any) -> None:
    result = det("e", "lt", "1")
    assert result.code == 0, result.err
    header = [cell.strip() for cell in result.out.splitlines()[0].split("|")]
    assert header == ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    assert '"lr": 0.1' in result.out
    csv_lines = det("e", "list-trials", "1", "--csv").out.splitlines()
    assert csv_lines[0] == "Trial ID,State,H-Params,Started,Ended,# of Batches"
    assert json.loads(det("e", "lt", "1", "--json").out)[1]["state"] == "ERROR"


# --- describe, config ------------------------------------------------------------------------------


def test_describe(det: Any, master: Any) -> None:
    result = det("e", "describe", "1")
    assert result.code == 0, result.err
    experiment_part, trials_part = result.out.split("\nTrials:\n")
    assert experiment_part.startswith("Experiment:\n")
    header, rows = _table(experiment_part.removeprefix("Experiment:\n"))
    assert header[:3] == ["Experiment ID", "State", "Progress"]
    assert rows[0][:3] == ["1", "COMPLETED", "100.0%"]
    assert trials_part.splitlines()[0].split("|")[0].strip() == "Trial ID"
    assert "Training Metric" not in result.out


def test_describe_metrics(det: Any, master: Any) -> None:
    result = det("e", "describe", "1", "--metrics")
    trials_header = result.out.split("\nTrials:\n")[1].splitlines()[0]
    cells = [cell.strip() for cell in trials_header.split("|")]
    assert cells[-2:] == ["Training Metric: loss", "Validation Metric: accuracy"]
    assert "0.25" in result.out and "0.9" in result.out


def test_describe_json(det: Any, master: Any) -> None:
    data = json.loads(det("e", "describe", "1", "--json").out)
    assert data["experiment"]["id"] == 1
    assert [t["id"] for t in data["trials"]] == [10, 11]


def test_config_prints_yaml(det: Any, master: Any) -> None:
    result = det("e", "config", "1")
    assert result.code == 0
    assert yaml.safe_load(result.out) == master.configs[1]


# --- lifecycle (the rules themselves are checked against the real master in test_real_master.py) --


@pytest.mark.parametrize(
    ("verb", "experiment_id", "printed"),
    [
        ("pause", 2, "Paused experiment 2"),
        ("activate", 2, "Activated experiment 2"),
        ("cancel", 2, "Canceled experiment 2"),
        ("kill", 2, "Killed experiment 2"),
        ("archive", 1, "Archived experiment 1"),
        ("unarchive", 3, "Unarchived experiment 3"),
    ],
)
def test_lifecycle(det: Any, master: Any, verb: str, experiment_id: int, printed: str) -> None:
    result = det("e", verb, str(experiment_id))
    assert (result.code, result.out) == (0, printed + "\n")
    assert master.actions == [(verb, experiment_id)]


def test_delete_with_yes(det: Any, master: Any) -> None:
    result = det("e", "delete", "1", "--yes")
    assert (result.code, result.out) == (0, "Deleted experiment 1\n")
    assert master.actions == [("delete", 1)]


def test_delete_names_what_the_master_could_not_remove(det: Any, master: Any) -> None:
    master.not_removed = ["checkpoint files /ckpt/abc: Permission denied\x1b]0;t\x07"]
    result = det("e", "delete", "1", "--yes")
    assert (result.code, result.out) == (1, "Deleted experiment 1\n")
    assert result.err == "not removed: checkpoint files /ckpt/abc: Permission denied\n"


def test_delete_without_a_terminal_needs_yes(det: Any, master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    result = det("e", "delete", "1")
    assert result.code == 1
    assert "--yes" in result.err
    assert master.actions == []


def test_delete_prompt(det: Any, master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    result = det("e", "delete", "1")
    assert result.code == 0
    assert "Aborting" in result.out
    assert master.actions == []
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    assert det("e", "delete", "1").out.endswith("Deleted experiment 1\n")
    assert master.actions == [("delete", 1)]


# --- wait, logs ------------------------------------------------------------------------------------


def test_wait_exit_code_follows_the_final_state(det: Any, master: Any) -> None:
    result = det("e", "wait", "1")
    assert (result.code, result.out) == (0, "Experiment 1 ended in state COMPLETED\n")
    result = det("e", "wait", "3", "--polling-interval", "0.01")
    assert (result.code, result.out) == (1, "Experiment 3 ended in state CANCELED\n")


def test_experiment_logs_show_the_first_trial(det: Any, master: Any) -> None:
    result = det("e", "logs", "1", "--tail", "1")
    assert result.out == "[2025-03-01T12:00:05+00:00] c0ffee [rank=0] || INFO: done\n"


# --- create ----------------------------------------------------------------------------------------


def test_create_posts_config_and_context(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", str(project / "const.yaml"), str(project / "code"))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith(f"Preparing files ({project / 'code'}) to send to master... ")
    assert lines[0].endswith("B and 2 files")
    assert lines[1] == "Created experiment 4"
    body = master.created[0]
    assert body["config"] == CONFIG  # the file as written
    assert body["paused"] is False
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["context"]))) as tar:
        assert sorted(tar.getnames()) == ["model.py", "train.py"]


def test_create_with_overrides_includes_and_paused(det: Any, master: Any, project: Path) -> None:
    result = det(
        "e", "create", str(project / "const.yaml"), str(project / "code"),
        "--config", "searcher.max_length.batches=99", "--config", "name=renamed",
        "-i", str(project / "extra.txt"), "--paused",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "and 3 files" in result.out
    body = master.created[0]
    config = yaml.safe_load(body["config"])
    assert config["searcher"]["max_length"] == {"batches": 99}
    assert config["name"] == "renamed"
    assert body["paused"] is True
    assert master.experiments[4]["state"] == "PAUSED"


def test_create_without_context_sends_none(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", str(project / "const.yaml"))
    assert result.out == "Created experiment 4\n"
    assert master.created[0]["context"] is None


def test_create_names_fields_accepted_but_not_acted_on_in_one_warning(
    det: Any, master: Any, tmp_path: Path
) -> None:
    config = tmp_path / "hpc.yaml"
    config.write_text(CONFIG + "slurm: {gpu_type: a100}\npbs: {slots_per_node: 2}\n")
    result = det("e", "create", str(config))
    assert result.code == 0, result.err
    assert result.out == "Created experiment 4\n"
    warnings = [line for line in result.err.splitlines() if line.startswith("Warning: ")]
    assert len(warnings) == 1, result.err
    assert "slurm" in warnings[0] and "pbs" in warnings[0]


def test_create_of_a_plain_config_prints_no_warning(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", str(project / "const.yaml"))
    assert result.code == 0 and "Warning" not in result.err


def test_create_invalid_config_stops_before_the_master(det: Any, master: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("entrypoint: 1\nsearcher: {name: random, metric: loss, max_trials: ten}\nfoo: 1\n")
    result = det("e", "create", str(bad), str(tmp_path))
    assert result.code == 1
    assert result.out == ""
    lines = result.err.splitlines()
    assert lines[0] == f"Error: the experiment configuration in {bad} has 3 problems:"
    assert "  searcher.max_trials: expected an integer >= 1, got 'ten'" in lines
    assert "  foo: unknown field" in lines
    assert master.created == []


def test_create_missing_config_file(det: Any, master: Any, tmp_path: Path) -> None:
    result = det("e", "create", str(tmp_path / "nope.yaml"))
    assert result.code == 1
    assert result.err.startswith("Error: ")
    assert "no such file" in result.err


def test_create_bad_override(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", str(project / "const.yaml"), "--config", "novalue")
    assert result.code == 1
    assert "--config" in result.err and "key=value" in result.err


def test_create_missing_context(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", str(project / "const.yaml"), str(project / "missing"))
    assert result.code == 1
    assert result.err == f"Error: context directory {project / 'missing'} does not exist\n"


def test_create_rejected_by_the_master(det: Any, master: Any, project: Path) -> None:
    (project / "const.yaml").write_text(CONFIG.replace("name: mnist", "name: rejected"))
    result = det("e", "create", str(project / "const.yaml"))
    assert result.code == 1
    assert result.err == "Error: resources.resource_pool: pool 'gpu' does not exist\n"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--local"], "Error: --local requires --test-mode\n"),
        (["--template", "t1", "--local", "--test-mode"], "--template is laid under the config by the master"),
        (["-f", "--paused"], "--follow-first-trial cannot be used with --paused"),
        (["-i", "x.txt"], "--include needs a context directory"),
    ],
)
def test_create_flag_errors(det: Any, master: Any, project: Path, flags: list[str], message: str) -> None:
    result = det("e", "create", str(project / "const.yaml"), *flags)
    assert result.code == 1
    assert message in result.err
    assert master.created == []


def test_create_follow_first_trial(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", str(project / "const.yaml"), "-f")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "Created experiment 4",
        "Waiting for first trial to begin...",
        "Following first trial with ID 104",
        "[2025-03-01T12:00:01+00:00] c0ffee [rank=0] || INFO: hello from the first trial",
        "[2025-03-01T12:00:02+00:00] c0ffee [rank=0] || INFO: training...",
        "[2025-03-01T12:00:03+00:00] c0ffee [rank=0] || INFO: bye",
        "Experiment 4 ended in state COMPLETED",
    ]


def test_create_follow_first_trial_fails_unless_completed(det: Any, master: Any, project: Path) -> None:
    master.final_state = "ERROR"
    result = det("e", "create", str(project / "const.yaml"), "--follow-first-trial")
    assert result.code == 1
    assert result.out.splitlines()[-1] == "Experiment 4 ended in state ERROR"
    assert result.err == "Error: every trial failed\n"


def test_test_mode_needs_local(det: Any, master: Any, project: Path) -> None:
    result = det("e", "create", "--test-mode", str(project / "const.yaml"))
    assert result.code == 1
    assert "use --local --test-mode" in result.err
    assert master.created == []


def test_local_test_mode_refuses_an_oversized_context(det: Any, cli_env: Path, project: Path) -> None:
    with open(project / "code" / "data.bin", "wb") as f:
        f.truncate(96 * 1024**2)  # sparse: the size counts, no disk is used
    result = det("e", "create", "--local", "--test", str(project / "const.yaml"), str(project / "code"))
    assert result.code == 1
    assert "over the limit" in result.err
    assert "data.bin" in result.err


# --- exactly-once create ---------------------------------------------------------------------------

REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_each_create_sends_its_own_request_id(det: Any, master: Any, project: Path) -> None:
    assert det("e", "create", str(project / "const.yaml")).out == "Created experiment 4\n"
    assert det("e", "create", str(project / "const.yaml")).out == "Created experiment 5\n"
    first, second = (body["request_id"] for body in master.create_requests)
    assert REQUEST_ID.match(first) and REQUEST_ID.match(second)
    assert first != second


def test_create_whose_answer_is_lost_is_resent_and_made_once(
    det: Any, master: Any, project: Path, answer_losing_master: tuple[str, list[str]]
) -> None:
    url, lost = answer_losing_master
    result = det("-m", url, "e", "create", str(project / "const.yaml"), str(project / "code"))
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == "Created experiment 4"
    assert lost == ["/det/api/v1/experiments"]  # the first answer never reached the CLI
    first, resent = master.create_requests
    assert resent == first  # same body, same request id: the master answers with what it made
    assert len(master.created) == 1
    assert sorted(master.experiments) == [1, 2, 3, 4]


def test_request_without_request_id_is_not_resent(
    master: Any, answer_losing_master: tuple[str, list[str]]
) -> None:
    from det_airflow.api.user import connect
    from det_airflow.errors import APIError

    url, _lost = answer_losing_master
    body = {"config": CONFIG, "context": None, "paused": False}
    with pytest.raises(APIError, match=f"cannot reach the master at {url}"):
        connect(url)._json("POST", "/experiments", json=body)
    assert len(master.create_requests) == 1


def test_test_is_determineds_alias_for_test_mode() -> None:
    from det_airflow.cli.main import build_parser

    args = build_parser().parse_args(["e", "create", "--local", "--test", "const.yaml", "."])
    assert (args.local, args.test_mode) == (True, True)


# --- labels, name, description ---------------------------------------------------------------------


def test_label_add_and_remove(det: Any, master: Any) -> None:
    result = det("e", "label", "add", "2", "baseline")
    assert (result.code, result.out) == (0, "Added label 'baseline' to experiment 2\n")
    assert det("e", "label", "add", "2", "team/vision").code == 0
    assert master.experiments[2]["labels"] == ["baseline", "team/vision"]
    result = det("e", "label", "remove", "2", "team/vision")
    assert (result.code, result.out) == (0, "Removed label 'team/vision' from experiment 2\n")
    assert master.experiments[2]["labels"] == ["baseline"]
    _, rows = _table(det("e", "describe", "2").out.split("\n\nTrials:")[0].removeprefix("Experiment:\n"))
    assert rows[0][-1] == "baseline"


def test_set_description_and_name(det: Any, master: Any) -> None:
    result = det("e", "set", "description", "2", "lr sweep, take 2")
    assert (result.code, result.out) == (0, "Set description of experiment 2 to 'lr sweep, take 2'\n")
    result = det("e", "set", "name", "2", "sweep-2")
    assert (result.code, result.out) == (0, "Set name of experiment 2 to 'sweep-2'\n")
    assert (master.experiments[2]["name"], master.experiments[2]["description"]) == (
        "sweep-2",
        "lr sweep, take 2",
    )


def test_set_empty_name_is_refused_before_the_master(det: Any, master: Any) -> None:
    result = det("e", "set", "name", "2", "  ")
    assert (result.code, result.err) == (1, "Error: an experiment's name cannot be empty\n")
    assert master.experiments[2]["name"] == "search"


def test_label_of_unknown_experiment(det: Any, master: Any) -> None:
    result = det("e", "label", "add", "99", "x")
    assert (result.code, result.err) == (1, "Error: experiment 99 not found\n")


# --- permission denied -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "action", "experiment_id"),
    [
        (["e", "pause", "2"], "pause", 2),
        (["e", "label", "add", "2", "mine"], "label", 2),
        (["e", "set", "name", "2", "mine"], "edit", 2),
        (["e", "delete", "2", "--yes"], "delete", 2),
        (["t", "kill", "10"], "kill trial 10 of", 1),
    ],
)
def test_permission_denied_is_one_line(
    det: Any, master: Any, argv: list[str], action: str, experiment_id: int
) -> None:
    from det_airflow.api.user import store_login

    from .conftest import CAROL_TOKEN

    store_login(master.url, "carol", CAROL_TOKEN)
    owner = master.experiments[experiment_id]["owner"]
    result = det(*argv)
    assert result.code == 1
    assert result.out == ""
    assert result.err == (
        f"Error: permission denied: user 'carol' may not {action} experiment {experiment_id}: "
        f"it belongs to '{owner}'; only its owner or an admin may change it\n"
    )
    assert master.actions == []


# --- control sequences from the master -------------------------------------------------------------

OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"
TITLE = "\x1b]0;pwned\x1b\\"
CLEAR = "\x1b[2J\x1b[H"


def test_names_labels_and_descriptions_are_printed_without_control_sequences(det: Any, master: Any) -> None:
    master.experiments[2].update(
        name=f"search{OSC52}", labels=[f"{CLEAR}prod"], description=f"d{TITLE}", owner=f"bob{CLEAR}"
    )
    for argv in (["e", "list"], ["e", "list", "--csv"], ["e", "describe", "2"]):
        result = det(*argv)
        assert result.code == 0, result.err
        assert "\x1b" not in result.out and "\x07" not in result.out
    _, rows = _table(det("e", "list").out)
    assert rows[1][1:3] == ["bob", "search"]
    _, rows = _table(det("e", "describe", "2").out.split("\n\nTrials:")[0].removeprefix("Experiment:\n"))
    assert (rows[0][5], rows[0][6], rows[0][-1]) == ("search", "d", "prod")
    # JSON escapes them instead, so scripts still get the stored value.
    assert json.loads(det("e", "list", "--json").out)[1]["name"] == f"search{OSC52}"


def test_errors_from_the_master_are_printed_without_control_sequences(det: Any, master: Any) -> None:
    from det_airflow.api.user import store_login

    from .conftest import CAROL_TOKEN

    master.experiments[2]["owner"] = f"bob{TITLE}{CLEAR}"
    store_login(master.url, "carol", CAROL_TOKEN)
    result = det("e", "pause", "2")
    assert result.code == 1
    assert result.err == (
        "Error: permission denied: user 'carol' may not pause experiment 2: it belongs to 'bob'; "
        "only its owner or an admin may change it\n"
    )
    master.experiments[1]["error"] = f"every trial failed{OSC52}"
    master.experiments[1]["state"] = "ERROR"
    result = det("e", "wait", "1")
    assert (result.code, result.err) == (1, "Error: every trial failed\n")
