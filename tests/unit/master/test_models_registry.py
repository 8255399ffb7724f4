"""The model registry on the master's own routes (SQLite, Airflow's simple auth manager): models and
versions made, read, edited and refused, and the checkpoints a version keeps from every deletion."""

from __future__ import annotations

from sqlalchemy import update

from det_airflow.master import checkpoint_gc, schema
from tests.unit.master.people_app import People, people

__all__ = ["people"]  # the fixture, used here

UUID = "c0ffee00-0000-4000-8000-000000000001"


def _experiment_with_checkpoint(people: People, *, owner: str = "alice", state: str = "COMPLETED") -> int:
    experiment_id = people.add_experiment(owner=owner, state=state)
    trial_id = people.add_trial(experiment_id, state=state)
    people.add_checkpoint(trial_id, UUID)
    return trial_id


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
        "bob",
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

    duplicate = people.call("bob", "POST", "/models", json={"name": "mnist"})
    assert (duplicate.status_code, duplicate.json()["detail"]) == (
        400,
        "a model named 'mnist' already exists",
    )
    slash = people.call("alice", "POST", "/models", json={"name": "a/b"})
    assert slash.status_code == 400 and "no '/'" in slash.json()["detail"]
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
    unreadable = people.call("dave", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID})
    assert unreadable.status_code == 403
    assert "may not register a checkpoint of experiment 1" in unreadable.json()["detail"]
    assert (
        people.call("alice", "POST", "/models/mnist/versions", json={"checkpoint_uuid": UUID}).status_code
        == 200
    )

    not_owner = people.call("bob", "DELETE", "/models/mnist/versions/1")
    assert not_owner.status_code == 403 and "belongs to 'alice'" in not_owner.json()["detail"]
    assert people.call(None, "GET", "/models").status_code == 401
    assert people.call("alice", "DELETE", "/models/mnist/versions/1").status_code == 200
    assert people.call("bob", "DELETE", "/models/mnist").status_code == 403
    assert people.call("dave", "DELETE", "/models/mnist").status_code == 200
    assert people.call("alice", "GET", "/models").json()["models"] == []


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
