"""Who may do what on the people routes: Airflow's auth manager decides on the experiment's DAG;
changes also need the experiment's owner or an admin."""

from __future__ import annotations

import pytest

from tests.unit.master.people_app import ORIGIN, People

READS = [
    "/experiments/{e}",
    "/experiments/{e}/config",
    "/experiments/{e}/trials",
    "/experiments/{e}/checkpoints",
    "/trials/{t}",
    "/trials/{t}/metrics",
    "/trials/{t}/logs",
    "/checkpoints/{c}",
]
# Reads that may carry secrets: the owner's and admins' only (tests/unit/master/test_context_download.py).
OWNER_ONLY_READS = ["/experiments/{e}/context"]

CHANGES = [
    ("POST", "/experiments/{e}/pause", None),
    ("POST", "/experiments/{e}/cancel", None),
    ("POST", "/experiments/{e}/kill", None),
    ("POST", "/experiments/{e}/labels", {"label": "new"}),
    ("DELETE", "/experiments/{e}/labels/keep", None),
    ("PATCH", "/experiments/{e}", {"name": "renamed", "description": "changed"}),
    ("POST", "/trials/{t}/kill", None),
]


def _setup(people: People) -> dict[str, object]:
    e = people.add_experiment(owner="alice")
    t = people.add_trial(e, state="RUNNING")
    people.add_checkpoint(t, "ckpt-1")
    return {"e": e, "t": t, "c": "ckpt-1"}


def _snapshot(people: People, ids: dict[str, object]) -> tuple:
    exp = people.experiment(int(ids["e"]))  # type: ignore[call-overload]
    trial = people.trial(int(ids["t"]))  # type: ignore[call-overload]
    return (exp.state, exp.name, exp.description, exp.labels, trial.state, trial.stop_requested)


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize("user", ["viewer", "alice", "bob", "admin"])
def test_anyone_who_may_read_the_dag_reads_the_experiment(people: People, user: str, path: str) -> None:
    ids = _setup(people)
    assert people.call(user, "GET", path.format(**ids)).status_code == 200


@pytest.mark.parametrize("path", READS + OWNER_ONLY_READS)
def test_reading_needs_a_login(people: People, path: str) -> None:
    ids = _setup(people)
    assert people.call(None, "GET", path.format(**ids)).status_code == 401


@pytest.mark.parametrize("path", READS + OWNER_ONLY_READS)
def test_a_user_without_read_access_to_the_dag_is_refused_naming_user_and_experiment(
    people: People, path: str
) -> None:
    people.add_experiment(owner="alice")  # det_1: carol may read it
    ids = _setup(people)  # det_2: carol may not
    answer = people.call("carol", "GET", path.format(**ids))
    assert answer.status_code == 403
    assert "user 'carol' may not" in answer.json()["detail"]
    assert f"experiment {ids['e']}" in answer.json()["detail"]


def test_the_list_shows_only_experiments_whose_dag_the_user_may_read(people: People) -> None:
    first = people.add_experiment(owner="alice")
    people.add_experiment(owner="alice")
    listed = people.call("carol", "GET", "/experiments").json()["experiments"]
    assert [e["id"] for e in listed] == [first]
    assert len(people.call("viewer", "GET", "/experiments").json()["experiments"]) == 2


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
@pytest.mark.parametrize(("user", "reason"), [("viewer", "needs edit access"), ("bob", "belongs to 'alice'")])
def test_changes_need_edit_access_and_ownership_and_change_nothing_when_refused(
    people: People, method: str, path: str, body: dict | None, user: str, reason: str
) -> None:
    ids = _setup(people)
    before = _snapshot(people, ids)
    answer = people.call(user, method, path.format(**ids), json=body)
    assert answer.status_code == 403
    assert f"user '{user}' may not" in answer.json()["detail"]
    assert reason in answer.json()["detail"]
    assert _snapshot(people, ids) == before


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
@pytest.mark.parametrize("user", ["alice", "admin"])
def test_the_owner_and_admins_change_the_experiment(
    people: People, method: str, path: str, body: dict | None, user: str
) -> None:
    ids = _setup(people)
    before = _snapshot(people, ids)
    answer = people.call(user, method, path.format(**ids), json=body)
    assert answer.status_code == 200, answer.text
    assert _snapshot(people, ids) != before


@pytest.mark.parametrize("user", ["viewer", "bob", None])
def test_deleting_someone_elses_experiment_is_refused_and_keeps_it(people: People, user: str | None) -> None:
    e = people.add_experiment(owner="alice", state="COMPLETED")
    answer = people.call(user, "DELETE", f"/experiments/{e}")
    assert answer.status_code in (401, 403)
    assert people.experiment(e).state == "COMPLETED"


def test_the_owner_deletes_a_finished_experiment(people: People) -> None:
    e = people.add_experiment(owner="alice", state="COMPLETED")
    answer = people.call("alice", "DELETE", f"/experiments/{e}")
    assert answer.status_code == 200, answer.text
    assert people.call("alice", "GET", f"/experiments/{e}").status_code == 404


def test_a_viewer_may_not_create_experiments(people: People) -> None:
    answer = people.call("viewer", "POST", "/experiments", json={"config": "searcher: {name: single}"})
    assert answer.status_code == 403
    assert answer.json()["detail"] == (
        "user 'viewer' may not create experiments: needs the right to create DAG runs"
    )
    assert people.call("admin", "GET", "/experiments?all=true").json()["experiments"] == []


def test_archive_and_unarchive_are_the_owners(people: People) -> None:
    e = people.add_experiment(owner="alice", state="COMPLETED")
    assert people.call("bob", "POST", f"/experiments/{e}/archive").status_code == 403
    assert people.experiment(e).archived is False
    assert people.call("alice", "POST", f"/experiments/{e}/archive").json()["experiment"]["archived"] is True
    assert (
        people.call("admin", "POST", f"/experiments/{e}/unarchive").json()["experiment"]["archived"] is False
    )


def test_whoami_names_the_logged_in_user(people: People) -> None:
    assert people.call("bob", "GET", "/me").json() == {"username": "bob", "admin": False}
    assert people.call("admin", "GET", "/me").json() == {"username": "admin", "admin": True}


# -- secrets in configs ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/experiments/{e}", "/experiments/{e}/config"])
@pytest.mark.parametrize("user", ["viewer", "bob"])
def test_others_see_config_secrets_masked(people: People, user: str, path: str) -> None:
    ids = _setup(people)
    config = people.call(user, "GET", path.format(**ids)).json()["config"]
    assert config["environment"]["environment_variables"] == ["WANDB_API_KEY=********", "PLAIN=********"]
    assert config["checkpoint_storage"]["access_key"] == "********"
    assert config["checkpoint_storage"]["host_path"] == str(people.storage)
    assert config["data"] == {"secrets": {"token": "********"}, "url": "https://example.org"}
    assert not any(secret in str(config) for secret in ("wandb-secret", "storage-secret", "data-secret"))


@pytest.mark.parametrize("path", ["/experiments/{e}", "/experiments/{e}/config"])
@pytest.mark.parametrize("user", ["alice", "admin"])
def test_the_owner_and_admins_see_the_config_as_submitted(people: People, user: str, path: str) -> None:
    ids = _setup(people)
    config = people.call(user, "GET", path.format(**ids)).json()["config"]
    assert config["environment"]["environment_variables"][0] == "WANDB_API_KEY=wandb-secret"
    assert config["checkpoint_storage"]["access_key"] == "storage-secret"
    assert config["data"]["secrets"] == {"token": "data-secret"}


# -- cross-site requests and the API document ------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"]
)
def test_form_posts_are_refused_and_change_nothing(people: People, content_type: str) -> None:
    ids = _setup(people)
    answer = people.call(
        "alice",
        "POST",
        f"/experiments/{ids['e']}/cancel",
        content=b"a=b",
        headers={"Content-Type": content_type},
    )
    assert answer.status_code == 415
    assert "send JSON" in answer.json()["detail"]
    assert people.experiment(int(ids["e"])).state == "ACTIVE"  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}],
)
def test_changes_from_another_site_are_refused(people: People, headers: dict[str, str]) -> None:
    ids = _setup(people)
    answer = people.call("alice", "POST", f"/experiments/{ids['e']}/pause", headers=headers)
    assert answer.status_code == 403
    assert "refused" in answer.json()["detail"]
    assert people.experiment(int(ids["e"])).state == "ACTIVE"  # type: ignore[call-overload]


@pytest.mark.parametrize("headers", [{}, {"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin"}])
def test_json_clients_and_the_servers_own_pages_may_change(people: People, headers: dict[str, str]) -> None:
    ids = _setup(people)
    answer = people.call("alice", "POST", f"/experiments/{ids['e']}/pause", headers=headers)
    assert answer.status_code == 200, answer.text
    assert people.experiment(int(ids["e"])).state == "PAUSED"  # type: ignore[call-overload]


def test_reads_from_another_site_are_not_refused_by_the_origin_check(people: People) -> None:
    ids = _setup(people)
    answer = people.call(
        "viewer", "GET", f"/experiments/{ids['e']}", headers={"Origin": "https://evil.example"}
    )
    assert answer.status_code == 200


def test_the_api_document_needs_a_login(people: People) -> None:
    assert people.client.get("/openapi.json").status_code == 401
    document = people.client.get("/openapi.json", headers={"X-Test-User": "viewer"})
    assert document.status_code == 200
    assert "/api/v1/experiments/{experiment_id}/labels" in document.json()["paths"]
    assert people.client.get("/docs").status_code == 404
