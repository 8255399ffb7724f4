"""What the master stores is bounded and plain: metadata by size and depth, a checkpoint's files by
name, a task's durations, commands without NUL, names without control or bidirectional-formatting
characters; and a command of any length still gets a name. Each refusal names the field, and
nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from det_airflow.api._bounds import MAX_JSON_DEPTH, MAX_METADATA_BYTES
from det_airflow.config._experiment import MAX_NAME_LENGTH
from det_airflow.master import schema
from tests.unit.master.creating import CONFIG, Creator
from tests.unit.master.people_app import People
from tests.unit.master.served import give_token

UUID = "c0ffee00-0000-4000-8000-000000000001"
CKPT = "5b0f9c1e-2a4d-4c8e-9f3a-7d6e5c4b3a21"
TRIAL_TOKEN = "stored-input-trial-token"
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "report\u202efdp.exe" shows as "reportexe.pdf"


def _rows(people: People, table: Any) -> int:
    with people.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _problem(answer: Any, loc: list[Any]) -> str:
    """The message of the 422's problem at ``loc``."""
    assert answer.status_code == 422, answer.text
    found = [p["msg"] for p in answer.json()["detail"] if p["loc"] == loc]
    assert found, answer.text
    return str(found[0])


# --- metadata -------------------------------------------------------------------------------------


@pytest.fixture
def model(people: People) -> str:
    experiment = people.add_experiment(owner="alice", state="COMPLETED")
    people.add_checkpoint(people.add_trial(experiment, state="COMPLETED"), UUID)
    assert people.call("alice", "POST", "/models", json={"name": "resnet"}).status_code == 200
    return "resnet"


def test_model_metadata_over_64_kib_or_32_levels_deep_is_refused(people: People, model: str) -> None:
    five_mb = {"blob": "x" * 5 * 1024 * 1024}
    deep = _nested(200)
    for body in ({"name": "big", "metadata": five_mb}, {"name": "deep", "metadata": deep}):
        answer = people.call("alice", "POST", "/models", json=body)
        message = _problem(answer, ["body", "metadata"])
        assert message in (
            f"Value error, {5 * 1024 * 1024 + 11} bytes of JSON, over the limit of {MAX_METADATA_BYTES} (64 KiB)",
            f"Value error, ['a']['a']['a']...: nested deeper than {MAX_JSON_DEPTH} levels",
        )
    for path, method in ((f"/models/{model}", "PATCH"), (f"/models/{model}/versions", "POST")):
        for metadata in (five_mb, deep):
            answer = people.call("alice", method, path, json={"checkpoint_uuid": UUID, "metadata": metadata})
            _problem(answer, ["body", "metadata"])
    assert _rows(people, schema.models) == 1 and _rows(people, schema.model_versions) == 0
    assert people.call("alice", "GET", f"/models/{model}").json()["model"]["metadata"] == {}

    # At the limits, it is stored.
    fits = {"blob": "x" * (MAX_METADATA_BYTES - 11), "deep": _nested(MAX_JSON_DEPTH - 1)}
    fits["blob"] = fits["blob"][: MAX_METADATA_BYTES - len(str(fits).replace("'", '"').replace(" ", ""))]
    answer = people.call("alice", "PATCH", f"/models/{model}", json={"metadata": fits})
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["model"]["metadata"] == fits


# --- a checkpoint's files --------------------------------------------------------------------------


@pytest.fixture
def trial(creator: Creator) -> int:
    experiment = creator.create(paused=True).json()["experiment"]["id"]
    trial_id = creator.people.add_trial(experiment, state="RUNNING")
    give_token(creator.people, trial_id, TRIAL_TOKEN)
    return trial_id


@pytest.mark.parametrize(
    "name, why",
    [
        ("../../etc/passwd", "without '', '.' or '..' parts"),
        ("model/../../x", "without '', '.' or '..' parts"),
        ("/etc/passwd", "not an absolute one"),
        ("a//b", "without '', '.' or '..' parts"),
        ("", "an empty file name"),
        ("model\x00.pt", "control characters and backslashes are refused"),
        ("..\\..\\x", "control characters and backslashes are refused"),
        ("x" * 300, "a part over 255 bytes"),
        ("a/" * 600, "over 1024 bytes"),
    ],
)
def test_checkpoint_files_outside_the_checkpoint_are_refused(
    people: People, trial: int, name: str, why: str
) -> None:
    answer = people.call(
        None,
        "POST",
        f"/runtime/trials/{trial}/checkpoints",
        json={"uuid": CKPT, "steps_completed": 10, "resources": {"model.pt": 5, name: 1}},
        headers={"Authorization": f"Bearer {TRIAL_TOKEN}"},
    )
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    assert problem["loc"][:2] == ["body", "resources"]
    assert why in problem["msg"]
    assert _rows(people, schema.checkpoints) == 0


def test_plain_checkpoint_files_are_stored(people: People, trial: int) -> None:
    resources = {"model.pt": 5, "shards/part-0001.bin": 7, "tokenizer/vocab.json": 1, "ünïcode name.txt": 2}
    answer = people.call(
        None,
        "POST",
        f"/runtime/trials/{trial}/checkpoints",
        json={"uuid": CKPT, "steps_completed": 10, "resources": resources},
        headers={"Authorization": f"Bearer {TRIAL_TOKEN}"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["checkpoint"]["resources"] == resources


# --- a task's durations and commands -----------------------------------------------------------------


@pytest.mark.parametrize(
    "idle", [".inf", "-.inf", ".nan", "1" + "0" * 400, "1.0e+400", "99999999d", "31d", 2**70]
)
def test_an_idle_timeout_that_is_not_finite_or_over_30_days_is_refused(
    people: People, creator: Creator, idle: Any
) -> None:
    answer = people.call(
        "alice", "POST", "/tasks", json={"type": "notebook", "config": f"idle_timeout: {idle}\n"}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"].startswith(
        "idle_timeout: expected a duration above 0 and at most 30 days (30d)"
    )
    assert people.call("alice", "GET", "/tasks").json()["tasks"] == []


def test_an_idle_timeout_of_30_days_is_kept(people: People, creator: Creator) -> None:
    answer = people.call(
        "alice", "POST", "/tasks", json={"type": "notebook", "config": "idle_timeout: 30d\n"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"]["idle_timeout"] == 30 * 86400.0


def test_a_nul_in_a_command_is_refused_naming_the_argument(people: People, creator: Creator) -> None:
    answer = people.call("alice", "POST", "/tasks", json={"type": "command", "command": ["echo", "a\x00b"]})
    assert _problem(answer, ["body", "command", 1]) == (
        "Value error, contains a NUL character (U+0000) at character 2, which no command line can carry"
    )
    config = 'entrypoint: [python3, "train.py\\0"]\n'
    answer = people.call("alice", "POST", "/tasks", json={"type": "command", "config": config})
    assert answer.status_code == 400, answer.text
    assert "entrypoint[1]: contains a NUL character (U+0000) at character 9" in answer.json()["detail"]
    assert people.call("alice", "GET", "/tasks").json()["tasks"] == []

    experiment = creator.create(config=CONFIG.replace("python3 train.py", '"python3 train.py\\0 --x"'))
    assert experiment.status_code == 400
    assert "entrypoint: contains a NUL character (U+0000) at character 17" in experiment.json()["detail"]
    assert creator.count() == 0


def test_a_command_of_any_length_gets_a_name_within_the_limit(people: People, creator: Creator) -> None:
    command = ["python3", "-c", "print('" + "x" * 300 + "')", "--flag\nwith a newline"]
    answer = people.call("alice", "POST", "/tasks", json={"type": "command", "command": command})
    assert answer.status_code == 200, answer.text
    task = answer.json()["task"]
    assert task["command"] == command
    with people.db.read() as conn:
        name = conn.execute(
            select(schema.experiments.c.name).where(schema.experiments.c.id == task["id"])
        ).scalar()
    assert len(name) == MAX_NAME_LENGTH
    assert name.startswith("command: python3 -c print('xxx") and name.endswith("x\u2026")


# --- names -----------------------------------------------------------------------------------------


RLO_REFUSED = (
    "contains U+202E (RIGHT-TO-LEFT OVERRIDE) at character 7; names may not contain control or "
    "bidirectional-formatting characters"
)


def test_bidirectional_overrides_and_controls_in_names_are_refused(
    people: People, creator: Creator, model: str
) -> None:
    name = f"report{RLO}fdp.exe"
    experiment = people.add_experiment(owner="alice")
    workspace = people.call("admin", "GET", "/workspaces").json()["workspaces"][0]["id"]
    for user, method, path, body, loc in [
        ("alice", "POST", "/models", {"name": name}, ["body", "name"]),
        ("alice", "PATCH", f"/models/{model}", {"name": name}, ["body", "name"]),
        (
            "alice",
            "POST",
            f"/models/{model}/versions",
            {"checkpoint_uuid": UUID, "name": name},
            ["body", "name"],
        ),
        ("alice", "PATCH", f"/experiments/{experiment}", {"name": name}, ["body", "name"]),
        ("alice", "POST", f"/experiments/{experiment}/labels", {"label": name}, ["body", "label"]),
        ("alice", "POST", "/models", {"name": "ok", "labels": ["fine", name]}, ["body", "labels", 1]),
        ("admin", "POST", "/workspaces", {"name": name}, ["body", "name"]),
        ("alice", "POST", f"/workspaces/{workspace}/projects", {"name": name}, ["body", "name"]),
        (
            "alice",
            "POST",
            "/webhooks",
            {"name": name, "url": "https://example.org/", "triggers": []},
            ["body", "name"],
        ),
    ]:
        answer = people.call(user, method, path, json=body)
        assert _problem(answer, loc) == f"Value error, {RLO_REFUSED}", (path, answer.text)

    assert _problem(
        people.call("alice", "POST", "/models", json={"name": "a\x1b[2Jb"}), ["body", "name"]
    ) == (
        "Value error, contains U+001B (a control character) at character 2; names may not contain "
        "control or bidirectional-formatting characters"
    )
    assert people.experiment(experiment).name == "mnist" and list(people.experiment(experiment).labels) == [
        "keep"
    ]
    assert [m["name"] for m in people.call("alice", "GET", "/models").json()["models"]] == [model]

    stored = creator.count()
    template = people.call("alice", "PUT", f"/templates/{name}", json={"config": "max_restarts: 1\n"})
    assert template.status_code == 400
    assert "no '/', control or bidirectional-formatting characters" in template.json()["detail"]

    created = creator.create(config=CONFIG.replace("name: tiny", f"name: {name}"))
    assert created.status_code == 400
    assert f"name: {RLO_REFUSED}" in created.json()["detail"]
    labelled = creator.create(config=CONFIG + "labels: [ok, '\u2066x']\n")
    assert labelled.status_code == 400
    assert "labels[1]: contains U+2066 (LEFT-TO-RIGHT ISOLATE) at character 1" in labelled.json()["detail"]
    assert creator.count() == stored


def test_names_in_other_scripts_and_with_emoji_are_kept(people: People) -> None:
    for name in ("модель-1", "نموذج", "模型 v2", "family 👨\u200d👩\u200d👧"):
        answer = people.call("alice", "POST", "/models", json={"name": name})
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"]["name"] == name
