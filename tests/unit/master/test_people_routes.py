"""Labels, name and description, killing one trial, deleting a checkpoint: what they change and
the bad input they refuse."""

from __future__ import annotations

import pytest

from tests.unit.master.people_app import People


def test_labels_are_added_once_and_removed(people: People) -> None:
    e = people.add_experiment(owner="alice")
    for _ in range(2):
        answer = people.call("alice", "POST", f"/experiments/{e}/labels", json={"label": "best run"})
        assert answer.json()["experiment"]["labels"] == ["keep", "best run"]
    answer = people.call("alice", "DELETE", f"/experiments/{e}/labels/best run")
    assert answer.json()["experiment"]["labels"] == ["keep"]
    assert people.call("alice", "DELETE", f"/experiments/{e}/labels/absent").json()["experiment"][
        "labels"
    ] == ["keep"]


@pytest.mark.parametrize("label", ["", "x" * 256, "red\x1b[31m"])
def test_bad_labels_are_refused(people: People, label: str) -> None:
    e = people.add_experiment(owner="alice")
    answer = people.call("alice", "POST", f"/experiments/{e}/labels", json={"label": label})
    assert answer.status_code == 422
    assert "label" in str(answer.json()["detail"])
    assert people.experiment(e).labels == ["keep"]


def test_an_experiment_has_at_most_100_labels(people: People) -> None:
    e = people.add_experiment(owner="alice")
    for i in range(99):
        assert (
            people.call("alice", "POST", f"/experiments/{e}/labels", json={"label": f"l{i}"}).status_code
            == 200
        )
    answer = people.call("alice", "POST", f"/experiments/{e}/labels", json={"label": "one too many"})
    assert answer.status_code == 400
    assert answer.json()["detail"] == f"experiment {e} already has 100 labels, the most allowed"
    assert len(people.experiment(e).labels) == 100


def test_name_and_description_are_changed(people: People) -> None:
    e = people.add_experiment(owner="alice")
    answer = people.call("alice", "PATCH", f"/experiments/{e}", json={"description": "lr sweep"})
    assert answer.json()["experiment"]["description"] == "lr sweep"
    answer = people.call("alice", "PATCH", f"/experiments/{e}", json={"name": "mnist v2"})
    assert answer.json()["experiment"]["name"] == "mnist v2"
    assert answer.json()["experiment"]["description"] == "lr sweep"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"name": "x" * 257}, 422, "name"),
        ({"name": ""}, 422, "name"),
        ({"name": "a\x07b"}, 422, "name"),
        ({"description": "x" * 10_001}, 422, "description"),
        ({}, 400, "nothing to change"),
    ],
)
def test_bad_names_and_descriptions_are_refused(
    people: People, body: dict, status: int, message: str
) -> None:
    e = people.add_experiment(owner="alice")
    answer = people.call("alice", "PATCH", f"/experiments/{e}", json=body)
    assert answer.status_code == status
    assert message in str(answer.json()["detail"])
    assert (people.experiment(e).name, people.experiment(e).description) == ("mnist", None)


def test_killing_a_running_trial_stops_it_at_once(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="RUNNING")
    trial = people.call("alice", "POST", f"/trials/{t}/kill").json()["trial"]
    assert (trial["state"], trial["stop_requested"]) == ("STOPPING_KILLED", True)


def test_killing_a_queued_trial_cancels_it(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="QUEUED")
    trial = people.call("admin", "POST", f"/trials/{t}/kill").json()["trial"]
    assert trial["state"] == "CANCELED"
    assert trial["end_time"] is not None


def test_killing_a_finished_trial_changes_nothing(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="COMPLETED")
    assert people.call("alice", "POST", f"/trials/{t}/kill").json()["trial"]["state"] == "COMPLETED"


def test_deleting_a_checkpoint_marks_it_and_removes_its_files(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="RUNNING")
    old = people.add_checkpoint(t, "old")
    people.add_checkpoint(t, "new")
    assert people.call("alice", "DELETE", "/checkpoints/old").json() == {}
    assert people.call("alice", "GET", "/checkpoints/old").json()["checkpoint"]["state"] == "DELETED"
    assert (old / "state.pt").exists(), "the files go with the queued removal, not in the request"
    assert people.call("alice", "DELETE", "/checkpoints/old").status_code == 200
    assert people.remove_files() == 1, "deleting it again queues nothing more"
    assert not old.exists()
    assert (people.storage / "new" / "state.pt").exists()


def test_the_latest_checkpoint_of_a_running_trial_is_kept(people: People) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="RUNNING", latest_checkpoint="latest")
    folder = people.add_checkpoint(t, "latest")
    answer = people.call("alice", "DELETE", "/checkpoints/latest")
    assert answer.status_code == 409
    assert f"latest of trial {t}, which is RUNNING" in answer.json()["detail"]
    assert people.checkpoint("latest").state == "COMPLETED"
    assert (folder / "state.pt").exists()


def test_a_checkpoint_outside_the_experiments_storage_is_not_deleted(people: People, tmp_path) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="COMPLETED")
    elsewhere = people.add_checkpoint(t, "stray", path=tmp_path / "elsewhere" / "stray")
    answer = people.call("alice", "DELETE", "/checkpoints/stray")
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        f"cannot remove the files of checkpoint stray: its files are not at a known path ({str(elsewhere)!r})"
    )
    assert people.checkpoint("stray").state == "COMPLETED"
    assert people.remove_files() == 0, "nothing was queued"
    assert (elsewhere / "state.pt").exists()


@pytest.mark.parametrize("user", ["viewer", "bob"])
def test_only_the_owner_or_an_admin_deletes_a_checkpoint(people: People, user: str) -> None:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="COMPLETED")
    folder = people.add_checkpoint(t, "kept")
    assert people.call(user, "DELETE", "/checkpoints/kept").status_code == 403
    assert people.checkpoint("kept").state == "COMPLETED"
    assert (folder / "state.pt").exists()
