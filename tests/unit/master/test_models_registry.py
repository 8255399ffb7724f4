"""The model registry on the master's own routes (SQLite, Airflow's simple auth manager): models and
versions made, read, edited and refused; a model is its owner's, and its name too; the checkpoints a
version keeps from every deletion."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text, update

from det_airflow.master import checkpoint_gc, models_registry, schema
from tests.unit.master.older_schema import database_at
from tests.unit.master.people_app import People, people

__all__ = ["people"]  # the fixture, used here

UUID = "c0ffee00-0000-4000-8000-000000000001"
BOBS_UUID = "c0ffee00-0000-4000-8000-0000000000b0"


def _experiment_with_checkpoint(
    people: People, *, owner: str = "alice", state: str = "COMPLETED", uuid: str = UUID
) -> int:
    experiment_id = people.add_experiment(owner=owner, state=state)
    trial_id = people.add_trial(experiment_id, state=state)
    people.add_checkpoint(trial_id, uuid)
    return trial_id


def _alices_model_with_a_version(people: People) -> None:
    """Alice's model ``resnet`` with her checkpoint as version 1; bob has a checkpoint of his own."""
    _experiment_with_checkpoint(people)
    _experiment_with_checkpoint(people, owner="bob", uuid=BOBS_UUID)
    made = people.call("alice", "POST", "/models", json={"name": "resnet", "description": "alice's"})
    assert made.status_code == 200, made.text
    registered = people.call("alice", "POST", "/models/resnet/versions", json={"checkpoint_uuid": UUID})
    assert registered.status_code == 200, registered.text


def _model(people: People, user: str, path: str = "/models/resnet", **params: Any) -> dict[str, Any]:
    answer = people.call(user, "GET", f"{path}/versions", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_model_is_created_listed_and_gets_a_checkpoint_as_version_1(people: People) -> None:
    trial_id = _experiment_with_checkpoint(people)
    made = people.call("alice", "POST", "/models", json={"name": "mnist", "labels": ["cnn", "cnn"]})
    assert made.status_code == 200, made.text
    assert made.json()["model"] | {"creation_time": 0, "last_updated_time": 0} == {
        "id": 1,
        "name": "mnist",
        "description": "",
        "notes": "",
        "metadata": {},
        "labels": ["cnn"],
        "owner": "alice",
        "archived": False,
        "creation_time": 0,
        "last_updated_time": 0,
        "num_versions": 0,
        "workspace_id": 1,  # the Uncategorized workspace's
        "workspace_name": "Uncategorized",
    }

    registered = people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID})
    assert registered.status_code == 200, registered.text
    version = registered.json()["model_version"]
    assert (version["version"], version["model_name"], version["owner"]) == (1, "mnist", "alice")
    assert (version["checkpoint"]["uuid"], version["checkpoint"]["trial_id"]) == (UUID, trial_id)
    assert version["validation_metrics"] == {"loss": 0.5}  # the trial's validation at step 10

    # Anyone logged in reads the registry, a viewer included.
    listed = people.call("viewer", "GET", "/models").json()["models"]
    assert [(m["name"], m["num_versions"]) for m in listed] == [("mnist", 1)]
    versions = people.call("viewer", "GET", "/models/mnist/versions").json()
    assert [v["checkpoint"]["uuid"] for v in versions["model_versions"]] == [UUID]
    assert people.call("viewer", "GET", "/models/1").json()["model"]["name"] == "mnist"
    latest = people.call("viewer", "GET", "/models/mnist/versions/0").json()["model_version"]
    assert latest["version"] == 1


def test_labels_notes_and_descriptions_are_edited_on_models_and_versions(people: People) -> None:
    _experiment_with_checkpoint(people)
    assert people.call("alice", "POST", "/models", json={"name": "mnist"}).status_code == 200
    assert (
        people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID}).status_code
        == 200
    )

    changed = people.call(
        "alice",
        "PATCH",
        "/models/mnist",
        json={"description": "digits", "labels": ["prod"], "notes": "# mnist"},
    ).json()["model"]
    assert (changed["description"], changed["labels"], changed["notes"]) == ("digits", ["prod"], "# mnist")
    version = people.call(
        "alice", "PATCH", "/models/mnist/versions/1", json={"notes": "best so far", "labels": ["a"]}
    ).json()["model_version"]
    assert (version["notes"], version["labels"], version["comment"]) == ("best so far", ["a"], "")
    renamed = people.call("alice", "PATCH", "/models/mnist", json={"name": "digits"}).json()["model"]
    assert renamed["name"] == "digits"
    assert people.call("alice", "GET", "/models/mnist").status_code == 404


def test_bad_input_is_refused_with_what_is_wrong(people: People) -> None:
    _experiment_with_checkpoint(people)
    assert people.call("alice", "POST", "/models", json={"name": "mnist"}).status_code == 200

    duplicate = people.call("alice", "POST", "/models", json={"name": "mnist"})
    assert (duplicate.status_code, duplicate.json()["detail"]) == (
        400,
        "'alice' already has a model named 'mnist'",
    )
    slash = people.call("alice", "POST", "/models", json={"name": "a/b"})
    assert slash.status_code == 400 and "no '/'" in slash.json()["detail"]
    # A right-to-left override would show "mnist\u202egpj.exe" as another name on everyone's pages.
    bidi = people.call("alice", "POST", "/models", json={"name": "best\u202egpj.exe"})
    assert bidi.status_code == 422 and "U+202E (RIGHT-TO-LEFT OVERRIDE) at character 5" in bidi.text
    # The registry's own check says the same for a name that reaches it another way.
    with pytest.raises(
        models_registry.ModelError, match=r"U\+202E \(RIGHT-TO-LEFT OVERRIDE\) at character 5"
    ):
        models_registry.check_name("best\u202egpj.exe")
    unknown = people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": "nope"})
    assert (unknown.status_code, unknown.json()["detail"]) == (404, "checkpoint nope not found")
    no_model = people.call("alice", "POST", "/models/other/versions", json={"checkpoint_uuid": UUID})
    assert (no_model.status_code, no_model.json()["detail"]) == (404, "model 'other' not found")
    missing = people.call("alice", "GET", "/models/mnist/versions/3")
    assert (missing.status_code, missing.json()["detail"]) == (404, "model 'mnist' has no version 3")

    assert people.call("alice", "POST", "/models/mnist/archive").json()["model"]["archived"] is True
    archived = people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID})
    assert archived.status_code == 409 and "archived" in archived.json()["detail"]


def test_who_may_do_what(people: People) -> None:
    _experiment_with_checkpoint(people)  # experiment 1, DAG det_1, which dave may not read
    viewer = people.call("viewer", "POST", "/models", json={"name": "mnist"})
    assert viewer.status_code == 403
    assert viewer.json()["detail"] == (
        "user 'viewer' may not create model 'mnist': needs the right to create DAG runs"
    )
    assert people.call("dave", "POST", "/models", json={"name": "mnist"}).status_code == 200
    # A version only from a checkpoint the caller may read, even into their own model.
    unreadable = people.call("dave", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID})
    assert unreadable.status_code == 403
    assert "may not register a checkpoint of experiment 1" in unreadable.json()["detail"]
    assert people.call("alice", "POST", "/models", json={"name": "mnist"}).status_code == 200
    assert (
        people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID}).status_code
        == 200
    )

    not_owner = people.call("bob", "DELETE", "/models/mnist/versions/1", params={"owner": "alice"})
    assert not_owner.status_code == 403 and "belongs to 'alice'" in not_owner.json()["detail"]
    assert people.call(None, "GET", "/models").status_code == 401
    assert people.call("alice", "DELETE", "/models/mnist/versions/1").status_code == 200
    assert people.call("bob", "DELETE", "/models/mnist", params={"owner": "alice"}).status_code == 403
    assert people.call("dave", "DELETE", "/models/mnist").status_code == 200  # dave's own
    assert people.call("admin", "DELETE", "/models/mnist", params={"owner": "alice"}).status_code == 200
    assert people.call("alice", "GET", "/models").json()["models"] == []


def test_only_the_models_owner_or_an_admin_changes_the_model_or_its_versions(people: People) -> None:
    _alices_model_with_a_version(people)
    before = _model(people, "alice")

    # Bob may read bob's checkpoint, yet may not make it alice's latest version, nor change hers.
    attempts = [
        ("POST", "/models/resnet/versions", {"checkpoint_uuid": BOBS_UUID}, "register a version of"),
        ("PATCH", "/models/resnet", {"description": "bob's now"}, "edit"),
        ("PATCH", "/models/resnet", {"name": "resnet-old"}, "rename"),
        ("POST", "/models/resnet/archive", None, "archive"),
        ("POST", "/models/resnet/unarchive", None, "unarchive"),
        ("PATCH", "/models/resnet/versions/1", {"notes": "bob was here"}, "edit version 1 of"),
        ("DELETE", "/models/resnet/versions/1", None, "delete version 1 of"),
        ("DELETE", "/models/resnet", None, "delete"),
    ]
    for method, path, body, action in attempts:
        answer = people.call("bob", method, path, json=body)
        assert answer.status_code == 403, (method, path, answer.text)
        assert answer.json()["detail"] == (
            f"user 'bob' may not {action} model 'resnet': it belongs to 'alice'; only its owner or an "
            "admin may"
        )
    assert _model(people, "alice") == before

    # Alice and an admin still do all of it.
    assert people.call("alice", "PATCH", "/models/resnet", json={"description": "v2"}).status_code == 200
    admin = {"owner": "alice"}
    assert people.call("admin", "POST", "/models/resnet/archive", params=admin).json()["model"]["archived"]
    assert people.call("admin", "POST", "/models/resnet/unarchive", params=admin).status_code == 200
    edited = people.call("admin", "PATCH", "/models/resnet/versions/1", params=admin, json={"notes": "ok"})
    assert edited.status_code == 200 and edited.json()["model_version"]["notes"] == "ok"
    second = people.call("alice", "POST", "/models/resnet/versions", json={"checkpoint_uuid": UUID})
    assert second.json()["model_version"]["version"] == 2
    renamed = people.call("alice", "PATCH", "/models/resnet", json={"name": "resnet50"})
    assert renamed.status_code == 200 and renamed.json()["model"]["owner"] == "alice"


def test_model_names_are_per_owner_so_nobody_takes_or_shadows_anothers(people: People) -> None:
    _alices_model_with_a_version(people)
    # Bob may not take her name away (rename hers), only use the same name for a model of his own.
    assert people.call("bob", "PATCH", "/models/resnet", json={"name": "old"}).status_code == 403
    impostor = people.call("bob", "POST", "/models", json={"name": "resnet", "description": "bob's"})
    assert impostor.status_code == 200, impostor.text
    assert impostor.json()["model"]["owner"] == "bob"
    into_his = people.call("bob", "POST", "/models/resnet/versions", json={"checkpoint_uuid": BOBS_UUID})
    assert into_his.status_code == 200 and into_his.json()["model_version"]["model_id"] != 1

    # Each owner's name means their own model; alice's latest version is still her checkpoint.
    hers = _model(people, "alice")
    assert (hers["model"]["description"], hers["model"]["owner"]) == ("alice's", "alice")
    assert [v["checkpoint"]["uuid"] for v in hers["model_versions"]] == [UUID]
    assert _model(people, "bob")["model"]["owner"] == "bob"
    latest = people.call("viewer", "GET", "/models/resnet/versions/0", params={"owner": "alice"})
    assert latest.json()["model_version"]["checkpoint"]["uuid"] == UUID

    # Someone with neither must say whose: a name never silently means the newer model.
    ambiguous = people.call("viewer", "GET", "/models/resnet")
    assert ambiguous.status_code == 400
    assert ambiguous.json()["detail"] == (
        "model 'resnet' is a name of several users' models ('alice', 'bob') and not of yours: say "
        "whose (the CLI's --owner, the API's owner parameter) or give its ID"
    )
    listed = people.call("viewer", "GET", "/models", params={"owner": "alice"}).json()["models"]
    assert [(m["name"], m["owner"]) for m in listed] == [("resnet", "alice")]
    missing = people.call("viewer", "GET", "/models/resnet", params={"owner": "carol"})
    assert (missing.status_code, missing.json()["detail"]) == (404, "model 'resnet' of 'carol' not found")


def test_a_registered_checkpoint_outlives_gc_checkpoint_delete_and_experiment_delete(people: People) -> None:
    trial_id = _experiment_with_checkpoint(people)
    newer = ["c0ffee00-0000-4000-8000-000000000002", "c0ffee00-0000-4000-8000-000000000003"]
    folders = {uuid: people.add_checkpoint(trial_id, uuid) for uuid in newer}
    folder = people.storage / UUID
    with people.db.begin() as conn:
        for steps, uuid in enumerate(newer, start=20):
            c = schema.checkpoints.c
            conn.execute(update(schema.checkpoints).where(c.uuid == uuid).values(steps_completed=steps))
    assert people.call("alice", "POST", "/models", json={"name": "mnist"}).status_code == 200
    assert (
        people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID}).status_code
        == 200
    )

    # The policy keeps the trial's latest and best (the newest); the registered oldest stays too.
    checkpoint_gc.collect(people.db, people.trial(trial_id).experiment_id)
    people.remove_files()
    states = [people.checkpoint(u).state for u in (UUID, *newer)]
    assert states == ["COMPLETED", "DELETED", "COMPLETED"]
    assert folder.is_dir() and not folders[newer[0]].exists()

    refused = people.call("alice", "DELETE", f"/checkpoints/{UUID}")
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"checkpoint {UUID} is registered as model 'mnist' version 1; delete that version to delete it"
    )
    experiment_id = people.trial(trial_id).experiment_id
    kept = people.call("alice", "DELETE", f"/experiments/{experiment_id}")
    assert kept.status_code == 409
    assert kept.json()["detail"] == (
        f"experiment {experiment_id} has checkpoints registered as model versions (checkpoint {UUID} is "
        "model 'mnist' version 1); delete those versions before deleting the experiment"
    )
    assert folder.is_dir() and people.checkpoint(UUID).state == "COMPLETED"


@pytest.fixture
def registry_of_version_16(tmp_path: Path) -> None:
    """The det tables as det-airflow 16 left them, with alice's model ``resnet`` and its version."""
    url = f"sqlite:///{tmp_path / 'airflow.db'}"  # where the people app's database is
    database_at(url, 16)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO det_models (name, description, notes, metadata, labels, owner, archived, "
                "creation_time, last_updated_time) "
                "VALUES ('resnet', 'stored', '', '{}', '[]', 'alice', 0, :now, :now)"
            ),
            {"now": now},
        )
    engine.dispose()


def test_models_stored_before_names_were_per_owner_keep_their_owner(
    registry_of_version_16: None, people: People
) -> None:
    # The people app upgraded the version-16 tables on start.
    assert people.db.schema_version() == schema.SCHEMA_VERSION
    _experiment_with_checkpoint(people, owner="bob", uuid=BOBS_UUID)
    stored = people.call("viewer", "GET", "/models/resnet").json()["model"]
    assert (stored["owner"], stored["description"]) == ("alice", "stored")
    refused = people.call("bob", "POST", "/models/resnet/versions", json={"checkpoint_uuid": BOBS_UUID})
    assert refused.status_code == 403
    assert people.call("bob", "POST", "/models", json={"name": "resnet"}).status_code == 200
    assert people.call("alice", "GET", "/models/resnet").json()["model"]["description"] == "stored"
