"""`det task create|fork|config|kill` (Determined's generic tasks) against the master's
own routes, served on loopback as in test_task_verbs.py; one test runs the task's trial for real
with the local runner, as a worker would."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from det_airflow import settings
from det_airflow.cli.main import build_parser
from det_airflow.master import experiments, schema, trials
from det_airflow.operators.runners import TrialLaunch
from det_airflow.operators.runners.local import LocalRunner
from tests.unit.cli.test_task_verbs import Cluster, _joined, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here

SHOW = """\
import os
print("in", os.path.basename(os.getcwd()), sorted(n for n in os.listdir(".") if not n.startswith(".")))
print(open("data.txt").read().strip())
"""


def _context(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "show.py").write_text(SHOW)
    (folder / "data.txt").write_text("from the context\n")
    return folder


def _config(tmp_path: Path, text: str, name: str = "task.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _stored_files(cluster: Cluster, task_id: int) -> list[str]:
    stored = cluster.people.experiment(task_id).context
    with tarfile.open(fileobj=io.BytesIO(stored), mode="r:gz") as tar:
        return sorted(tar.getnames())


# --- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            "task create t.yaml ctx --config resources.slots=2 -f --fork 3 --project_id 4 -i extra",
            {
                "config_file": "t.yaml",
                "context_dir": "ctx",
                "context": None,
                "config_overrides": ["resources.slots=2"],
                "follow": True,
                "fork": 3,
                "project_id": 4,
                "include": ["extra"],
            },
        ),
        ("task create t.yaml -c ctx --no_pause", {"context_dir": None, "context": "ctx", "no_pause": True}),
        (
            "task fork 3 --config-file f.yaml -f",
            {"parent_task_id": 3, "config_file": "f.yaml", "follow": True},
        ),
        ("task fork 3 --project-id 2", {"parent_task_id": 3, "config_file": None, "project_id": 2}),
        ("task config 5 --json", {"task_id": 5, "json": True}),
        ("task kill 5 6 --root", {"task_ids": [5, 6], "root": True}),
    ],
)
def test_the_generic_verbs_parse(argv: str, expected: dict[str, Any]) -> None:
    args = build_parser().parse_args(argv.split())
    assert {key: getattr(args, key) for key in expected} == expected


# --- create, list, config --------------------------------------------------------------------------


def test_create_stores_the_task_the_list_shows_it_and_config_answers_it(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    context = _context(tmp_path)
    text = "# prepares the data\nentrypoint: [python3, show.py]\nresources:\n  slots: 0\n"
    result = det("task", "create", str(_config(tmp_path, text)), str(context))
    assert result.code == 0, result.err
    size = sum(path.stat().st_size for path in context.iterdir())
    assert result.out.splitlines() == [
        f"Preparing files ({context}) to send to master... {size:.1f}B and 2 files",
        "Created task 1",
    ]
    assert _stored_files(cluster, 1) == ["data.txt", "show.py"]

    header, rows = _table(det("task", "list").out)
    assert rows == [
        ["1", "generic", "python3 show.py", "alice", "QUEUED", "0", "default_pool", rows[0][7], ""]
    ]
    jobs = json.loads(det("job", "list", "--json").out)
    assert [(job["id"], job["type"]) for job in jobs] == [(1, "TYPE_GENERIC")]

    shown = det("task", "config", "1")
    assert (shown.code, shown.out) == (0, "entrypoint:\n- python3\n- show.py\nresources:\n  slots: 0\n")
    assert json.loads(det("task", "config", "1", "--json").out) == {
        "entrypoint": ["python3", "show.py"],
        "resources": {"slots": 0},
    }


def test_config_overrides_and_the_context_option(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    context = _context(tmp_path)
    extra = tmp_path / "extra.txt"
    extra.write_text("more\n")
    config = _config(tmp_path, "entrypoint: sh run.sh\nresources: {slots: 1}\n")
    result = det(
        "task",
        "create",
        str(config),
        "-c",
        str(context),
        "-i",
        str(extra),
        "--config",
        "resources.slots=2",
        "--config",
        "description=data prep",
    )
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == "Created task 1"
    assert _stored_files(cluster, 1) == ["data.txt", "extra.txt", "show.py"]
    _, rows = _table(det("task", "list").out)
    assert [row[:6] for row in rows] == [["1", "generic", "data prep", "alice", "QUEUED", "2"]]
    assert yaml.safe_load(det("task", "config", "1").out) == {
        "entrypoint": "sh run.sh",
        "resources": {"slots": 2},
        "description": "data prep",
    }


def test_a_task_without_a_context_runs_in_an_empty_folder(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    result = det("task", "create", str(_config(tmp_path, "entrypoint: echo hi\n")))
    assert (result.code, result.out) == (0, "Created task 1\n")
    assert not cluster.people.experiment(1).context


# --- running it ----------------------------------------------------------------------------------


def _run_trial(cluster: Cluster, task_id: int, workdir: Path) -> None:
    """What a worker's local runner does with the task's trial: fetch its context, run its entrypoint
    in its work folder, ship the output to its logs and report its exit."""
    trial_id = cluster.start(task_id)
    with cluster.people.db.read() as conn:
        spec = trials.trial_spec(
            conn, experiments.get_experiment(conn, task_id), trials.get_trial(conn, trial_id)
        )
    launch = TrialLaunch.from_answer(
        spec,
        token="trial-token",
        master_url="http://127.0.0.1:9",
        workdir=workdir,
        fetch_context=lambda: cluster.people.experiment(task_id).context,
    )
    lines: list[str] = []
    runner = LocalRunner(settings.load({}), on_phase=lambda state, why: None)
    code = runner.run_trial(launch, on_output=lambda line, stream: lines.append(line), stop=threading.Event())
    cluster.log(trial_id, *lines)
    cluster.exit(trial_id, code)


def test_create_follow_runs_the_entrypoint_in_the_context_folder_to_its_end(
    det: Any, cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a worker that is not root: it runs as itself
    context = _context(tmp_path)
    config = _config(tmp_path, yaml.safe_dump({"entrypoint": [sys.executable, "show.py"]}))
    thread = cluster.in_background(lambda task_id: _run_trial(cluster, task_id, tmp_path / "trial_1"))
    result = det("task", "create", "-f", str(config), str(context))
    _joined(thread)

    assert (result.code, result.err) == (0, "")
    lines = result.out.splitlines()
    assert lines[1] == "Created task 1"
    said = [line.rsplit("|| INFO: ", 1)[-1] for line in lines[2:]]
    assert said[-2:] == ["in trial_1 ['data.txt', 'show.py']", "from the context"]
    _, rows = _table(det("task", "list").out)
    assert (rows[0][4], rows[0][8]) == ("TERMINATED (COMPLETED)", "0")
    assert det("task", "logs", "--tail", "1", "1").out.endswith("|| INFO: from the context\n")


def test_create_follow_exits_with_the_tasks_status(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    def runner(task_id: int) -> None:
        trial_id = cluster.start(task_id)
        cluster.log(trial_id, "failing")
        cluster.exit(trial_id, 3)

    thread = cluster.in_background(runner)
    result = det("task", "create", "--follow", str(_config(tmp_path, "entrypoint: exit 3\n")))
    _joined(thread)
    assert result.code == 3
    assert result.out.splitlines()[-1].endswith("|| INFO: failing")
    assert result.err == "Task 1 ended (ERROR): exit status 3\n"


# --- fork ------------------------------------------------------------------------------------------


def test_fork_starts_from_the_parents_config_and_context(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    context = _context(tmp_path)
    parent = "entrypoint: [python3, show.py]\nresources: {slots: 2}\ndescription: parent\n"
    assert det("task", "create", str(_config(tmp_path, parent)), str(context)).code == 0
    fork_file = _config(tmp_path, "entrypoint: [echo, forked]\n", "fork.yaml")

    result = det("task", "fork", "1", "--config-file", str(fork_file))
    assert (result.code, result.out) == (0, "Created task 2\n"), result.err
    # As Determined: each field the fork gives replaces the parent's whole; the rest are the parent's.
    assert yaml.safe_load(det("task", "config", "2").out) == {
        "entrypoint": ["echo", "forked"],
        "resources": {"slots": 2},
        "description": "parent",
    }
    assert cluster.people.experiment(2).context == cluster.people.experiment(1).context

    assert det("task", "fork", "1").out == "Created task 3\n"
    assert yaml.safe_load(det("task", "config", "3").out) == yaml.safe_load(parent)

    other = tmp_path / "other"
    other.mkdir()
    (other / "b.txt").write_text("b\n")
    via_create = det(
        "task", "create", str(fork_file), str(other), "--fork", "1", "--config", "description=four"
    )
    assert via_create.out.splitlines()[-1] == "Created task 4", via_create.err
    assert yaml.safe_load(det("task", "config", "4").out) == {
        "entrypoint": ["echo", "forked"],
        "resources": {"slots": 2},
        "description": "four",
    }
    assert _stored_files(cluster, 4) == ["b.txt"]
    _, rows = _table(det("task", "list").out)
    assert [row[:3] for row in rows] == [
        ["1", "generic", "parent"],
        ["2", "generic", "parent"],
        ["3", "generic", "parent"],
        ["4", "generic", "four"],
    ]


def test_only_a_generic_task_of_ones_own_is_forked(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    assert det("cmd", "run", "-d", "echo", "hi").out == "Launched command 1\n"
    refused = det("task", "fork", "1")
    assert (refused.code, refused.err) == (
        1,
        "Error: forked_from: task 1 is a command: only a generic task can be forked\n",
    )
    secret = "entrypoint: python3 job.py\nenvironment:\n  environment_variables: [API_KEY=alice-secret]\n"
    assert det("task", "create", str(_config(tmp_path, secret))).out == "Created task 2\n"

    cluster.login("bob")
    refused = det("task", "fork", "2")
    assert (refused.code, refused.err) == (
        1,
        "Error: permission denied: user 'bob' may not fork task 2: its config and context may hold "
        "secrets; only its owner 'alice' or an admin may\n",
    )
    # A reader sees the config with its secrets masked, as an experiment's.
    shown = yaml.safe_load(det("task", "config", "2").out)
    assert "alice-secret" not in json.dumps(shown)
    assert shown["entrypoint"] == "python3 job.py"
    assert [t for t in cluster.task_ids()] == [1, 2]

    cluster.login("admin")
    assert det("task", "fork", "2").out == "Created task 3\n"
    assert "alice-secret" in det("task", "config", "2").out


# --- projects -------------------------------------------------------------------------------------


def _project_id(cluster: Cluster, name: str) -> int:
    with cluster.people.db.read() as conn:
        return int(
            conn.execute(select(schema.projects.c.id).where(schema.projects.c.name == name)).scalar_one()
        )


def test_project_id_places_the_task_where_its_creator_may_file(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.login("admin")
    assert det("workspace", "create", "research").code == 0
    cluster.login("alice")
    assert det("project", "create", "research", "vision").code == 0
    project = _project_id(cluster, "vision")
    config = str(_config(tmp_path, "entrypoint: echo hi\n"))

    assert det("task", "create", config, "--project_id", str(project)).out == "Created task 1\n"
    assert cluster.people.experiment(1).project_id == project
    # A task is not an experiment of the project's lists.
    assert json.loads(det("project", "list-experiments", "research", "vision", "--json").out) == []

    cluster.login("bob")
    refused = det("task", "create", config, "--project_id", str(project))
    assert refused.code == 1
    assert refused.err.startswith(
        "Error: permission denied: user 'bob' may not create experiments in project 'vision'"
    )
    missing = det("task", "create", config, "--project_id", "99")
    assert (missing.code, missing.err) == (1, "Error: project 99 not found\n")
    assert cluster.task_ids() == [1]


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "argv", "error"),
    [
        ({}, ["missing.yaml"], "Error: missing.yaml: no such file\n"),
        (
            {"t.yaml": "- echo\n"},
            ["t.yaml"],
            "Error: t.yaml: expected a mapping of task config fields, got list\n",
        ),
        (
            {"t.yaml": "resources: {slots: 1}\n"},
            ["t.yaml"],
            "Error: entrypoint: a generic task runs its config's entrypoint: e.g. 'entrypoint: python3 run.py'\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\nidle_timout: 5m\n"},
            ["t.yaml"],
            "Error: idle_timout: not a task config field; did you mean 'idle_timeout'?\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\nidle_timeout: 5m\n"},
            ["t.yaml"],
            "Error: idle_timeout: a generic task runs until it ends; idle_timeout is for notebooks, "
            "shells and TensorBoards\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\n", "file.txt": "x"},
            ["t.yaml", "file.txt"],
            "Error: context directory file.txt is not a directory\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\n"},
            ["t.yaml", "nowhere"],
            "Error: context directory nowhere does not exist\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\n", "ctx/a": "a"},
            ["t.yaml", "ctx", "-c", "ctx"],
            "Error: give the context folder once: as CONTEXT_DIR or as -c/--context\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\n", "x": "x"},
            ["t.yaml", "-i", "x"],
            "Error: --include needs a context folder (CONTEXT_DIR or -c/--context)\n",
        ),
        (
            {"t.yaml": "entrypoint: echo\n"},
            ["t.yaml", "--config", "resources.slots"],
            "Error: --config: expected key=value (e.g. searcher.max_trials=4), got 'resources.slots'\n",
        ),
        ({"t.yaml": "entrypoint: echo\n"}, ["t.yaml", "--fork", "99"], "Error: task 99 not found\n"),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(
    det: Any,
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    argv: list[str],
    error: str,
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    result = det("task", "create", *argv)
    assert (result.code, result.err) == (1, error)
    assert cluster.task_ids() == []


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["task", "fork", "99"], "Error: task 99 not found\n"),
        (["task", "config", "99"], "Error: task 99 not found\n"),
        (["task", "kill", "99"], "Error: task 99 not found\n"),
    ],
)
def test_the_other_verbs_refuse_in_one_line(det: Any, cluster: Cluster, argv: list[str], error: str) -> None:
    result = det(*argv)
    assert (result.code, result.out, result.err) == (1, "", error)


# --- kill ----------------------------------------------------------------------------------------


def test_task_kill_stops_any_type_and_the_other_nouns_name_the_generic_one(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    assert det("task", "create", str(_config(tmp_path, "entrypoint: sleep 100\n"))).code == 0
    assert det("notebook", "start", "-d").code == 0
    wrong = det("cmd", "kill", "1")
    assert (wrong.code, wrong.err) == (
        1,
        "Error: task 1 is a generic task, not a command: use `det task ...` for it\n",
    )
    cluster.login("bob")
    refused = det("task", "kill", "1")
    assert refused.code == 1
    assert refused.err.startswith("Error: permission denied: user 'bob' may not kill generic experiment 1")
    cluster.login("alice")
    result = det("task", "kill", "1", "2", "--root")
    assert (result.code, result.out) == (0, "Killed generic task 1\nKilled notebook 2\n")
    _, rows = _table(det("task", "list").out)
    assert {row[4] for row in rows} <= {"TERMINATING", "TERMINATED (CANCELED)"}
