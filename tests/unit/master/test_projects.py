"""Workspaces and projects on the master's routes: who may make them, where experiments land,
moving them, and that a project shows each caller only the experiments they may read. A project is
its owner's (and its workspace's owner's): only they, or an admin, edit it or file experiments into it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.master import projects, schema
from tests.unit.master.creating import CONFIG, Creator
from tests.unit.master.people_app import People


def _workspace(people: People, name: str = "research") -> dict[str, Any]:
    answer = people.call("admin", "POST", "/workspaces", json={"name": name})
    assert answer.status_code == 200, answer.text
    return answer.json()["workspace"]


def _project(people: People, workspace_id: int, name: str = "vision", user: str = "alice") -> dict[str, Any]:
    answer = people.call(user, "POST", f"/workspaces/{workspace_id}/projects", json={"name": name})
    assert answer.status_code == 200, answer.text
    return answer.json()["project"]


def _experiment_ids(people: People, user: str, project_id: int) -> list[int]:
    answer = people.call(user, "GET", f"/projects/{project_id}/experiments")
    assert answer.status_code == 200, answer.text
    return [e["id"] for e in answer.json()["experiments"]]


def test_uncategorized_exists_and_holds_experiments_that_name_no_project(people: People) -> None:
    first = people.add_experiment(owner="alice")
    listed = people.call("viewer", "GET", "/workspaces").json()["workspaces"]
    assert [(w["name"], w["num_projects"]) for w in listed] == [("Uncategorized", 1)]
    projects = people.call("viewer", "GET", f"/workspaces/{listed[0]['id']}/projects").json()["projects"]
    assert [(p["name"], p["num_experiments"], p["num_active_experiments"]) for p in projects] == [
        ("Uncategorized", 1, 1)
    ]
    assert _experiment_ids(people, "alice", projects[0]["id"]) == [first]


def test_admins_create_workspaces_and_creators_create_projects(people: People) -> None:
    refused = people.call("alice", "POST", "/workspaces", json={"name": "research"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "user 'alice' may not create workspace 'research': only admins may"
    workspace = _workspace(people)
    assert (workspace["name"], workspace["created_by"], workspace["num_projects"]) == ("research", "admin", 0)
    viewer = people.call("viewer", "POST", f"/workspaces/{workspace['id']}/projects", json={"name": "vision"})
    assert viewer.status_code == 403 and "needs the right to create DAG runs" in viewer.json()["detail"]
    project = _project(people, workspace["id"])
    assert (project["workspace_name"], project["created_by"], project["notes"]) == ("research", "alice", "")
    named = people.call("viewer", "GET", f"/workspaces/{workspace['id']}/projects", params={"name": "vision"})
    assert [p["id"] for p in named.json()["projects"]] == [project["id"]]


def test_bad_and_duplicate_names_are_refused_with_one_clear_line(people: People) -> None:
    workspace = _workspace(people)
    again = people.call("admin", "POST", "/workspaces", json={"name": "research"})
    assert (again.status_code, again.json()["detail"]) == (400, "a workspace named 'research' already exists")
    _project(people, workspace["id"])
    dup = people.call("bob", "POST", f"/workspaces/{workspace['id']}/projects", json={"name": "vision"})
    assert dup.json()["detail"] == "a project named 'vision' already exists in workspace 'research'"
    blank = people.call("admin", "POST", "/workspaces", json={"name": " padded"})
    assert (
        blank.status_code == 400 and "no control characters or spaces at either end" in blank.json()["detail"]
    )
    bidi = people.call("alice", "POST", f"/workspaces/{workspace['id']}/projects", json={"name": "a\u2066b"})
    assert bidi.status_code == 422 and "U+2066 (LEFT-TO-RIGHT ISOLATE) at character 2" in bidi.text
    with pytest.raises(projects.ProjectError, match=r"^project name 'a\\u2066b' contains U\+2066"):
        projects.check_name("project", "a\u2066b")
    missing = people.call("alice", "POST", "/workspaces/99/projects", json={"name": "x"})
    assert (missing.status_code, missing.json()["detail"]) == (404, "workspace 99 not found")
    assert people.call("alice", "GET", "/projects/99").status_code == 404


def test_notes_are_saved_and_read_back(people: People) -> None:
    project = _project(people, _workspace(people)["id"])
    notes = "# Plan\n\n- try a *bigger* batch\n"
    saved = people.call("alice", "PATCH", f"/projects/{project['id']}", json={"notes": notes})
    assert saved.status_code == 200 and saved.json()["project"]["notes"] == notes
    again = people.call("viewer", "GET", f"/projects/{project['id']}").json()["project"]
    assert (again["notes"], again["description"]) == (notes, "")
    refused = people.call("viewer", "PATCH", f"/projects/{project['id']}", json={"notes": "mine"})
    assert refused.status_code == 403
    assert people.call("viewer", "GET", f"/projects/{project['id']}").json()["project"]["notes"] == notes


def test_an_experiment_is_moved_by_its_owner_or_an_admin(people: People) -> None:
    experiment_id = people.add_experiment(owner="alice")
    project = _project(people, _workspace(people)["id"])
    body = {"workspace": "research", "project": "vision"}
    other = people.call("bob", "POST", f"/experiments/{experiment_id}/move", json=body)
    assert other.status_code == 403 and "it belongs to 'alice'" in other.json()["detail"]
    moved = people.call("alice", "POST", f"/experiments/{experiment_id}/move", json=body)
    assert moved.status_code == 200 and moved.json()["project"]["num_experiments"] == 1
    assert _experiment_ids(people, "alice", project["id"]) == [experiment_id]
    assert _experiment_ids(people, "alice", 1) == []
    back = {"workspace": "Uncategorized", "project": "Uncategorized"}
    assert people.call("admin", "POST", f"/experiments/{experiment_id}/move", json=back).status_code == 200
    assert _experiment_ids(people, "alice", 1) == [experiment_id]


def test_moving_to_a_project_that_does_not_exist_says_how_to_make_it(people: People) -> None:
    experiment_id = people.add_experiment(owner="alice")
    _workspace(people)
    answer = people.call(
        "alice",
        "POST",
        f"/experiments/{experiment_id}/move",
        json={"workspace": "research", "project": "nlp"},
    )
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        "project 'nlp' not found in workspace 'research'; create it with `det project create research nlp`"
    )
    missing = people.call("alice", "POST", "/experiments/99/move", json={"workspace": "a", "project": "b"})
    assert missing.status_code == 404


def test_a_project_lists_only_the_experiments_the_caller_may_read(people: People) -> None:
    project = _project(people, _workspace(people)["id"])
    ids = [people.add_experiment(owner="alice") for _ in range(2)]  # DAGs det_1 and det_2
    for experiment_id in ids:
        answer = people.call(
            "alice",
            "POST",
            f"/experiments/{experiment_id}/move",
            json={"workspace": "research", "project": "vision"},
        )
        assert answer.status_code == 200
    assert _experiment_ids(people, "alice", project["id"]) == ids
    assert _experiment_ids(people, "carol", project["id"]) == [ids[0]]  # carol reads det_1 only
    assert _experiment_ids(people, "dave", project["id"]) == [ids[1]]  # dave may not read det_1


def test_a_config_naming_a_project_lands_there_and_an_unknown_one_is_refused(creator: Creator) -> None:
    people = creator.people
    project = _project(people, _workspace(people)["id"])
    placed = CONFIG + "workspace: research\nproject: vision\n"
    created = creator.create(config=placed)
    assert created.status_code == 200, created.text
    assert _experiment_ids(people, "alice", project["id"]) == [created.json()["experiment"]["id"]]
    unknown = creator.create(config=CONFIG + "workspace: research\nproject: nlp\n")
    assert unknown.status_code == 400
    assert "project 'nlp' not found in workspace 'research'" in unknown.json()["detail"]
    nowhere = creator.create(config=CONFIG + "workspace: lab\nproject: nlp\n")
    assert nowhere.json()["detail"] == (
        "workspace 'lab' not found; an admin creates it with `det workspace create lab`"
    )
    assert creator.count() == 1


def test_only_the_project_or_workspace_owner_or_an_admin_edits_a_project(people: People) -> None:
    workspace = _workspace(people)
    project = _project(people, workspace["id"])  # alice's, in the admin's workspace
    path = f"/projects/{project['id']}"
    assert people.call("alice", "PATCH", path, json={"notes": "alice's plan"}).status_code == 200

    refused = people.call("bob", "PATCH", path, json={"notes": "bob's plan", "description": "bob's"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "user 'bob' may not edit project 'vision': it belongs to 'alice', its workspace 'research' to "
        "'admin'; only they or an admin may"
    )
    kept = people.call("viewer", "GET", path).json()["project"]
    assert (kept["notes"], kept["description"]) == ("alice's plan", "")

    assert people.call("admin", "PATCH", path, json={"description": "by an admin"}).status_code == 200
    # The owner of the workspace edits its projects too (here, one an admin made for dave).
    with people.db.begin() as conn:
        w = schema.workspaces
        conn.execute(update(w).where(w.c.id == workspace["id"]).values(created_by="dave"))
    assert people.call("dave", "PATCH", path, json={"notes": "dave's review"}).status_code == 200
    # Uncategorized is everyone's place for experiments, and only admins' to edit.
    uncategorized = people.call("alice", "PATCH", "/projects/1", json={"notes": "mine"})
    assert uncategorized.status_code == 403
    assert uncategorized.json()["detail"] == (
        "user 'alice' may not edit project 'Uncategorized': the Uncategorized project is admins'"
    )
    assert people.call("admin", "PATCH", "/projects/1", json={"notes": "shared"}).status_code == 200


def test_experiments_are_filed_only_into_projects_the_caller_may_file_into(
    people: People, creator: Creator
) -> None:
    project = _project(people, _workspace(people)["id"])  # alice's
    bobs = people.add_experiment(owner="bob")
    into_hers = {"workspace": "research", "project": "vision"}

    refused = people.call("bob", "POST", f"/experiments/{bobs}/move", json=into_hers)
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        f"user 'bob' may not move experiment {bobs} into project 'vision' of workspace 'research': it "
        "belongs to 'alice', its workspace 'research' to 'admin'; only they or an admin may"
    )
    created = creator.create("bob", config=CONFIG + "workspace: research\nproject: vision\n")
    assert created.status_code == 403
    assert (
        "may not create experiments in project 'vision' of workspace 'research'" in created.json()["detail"]
    )
    unmanaged = people.call(
        "bob",
        "POST",
        "/experiments/unmanaged",
        json={"config": {"name": "off-cluster", "workspace": "research", "project": "vision"}},
    )
    assert unmanaged.status_code == 403
    assert "may not create experiments in project 'vision'" in unmanaged.json()["detail"]
    assert _experiment_ids(people, "admin", project["id"]) == []

    # Her project takes her experiments, and an admin's filing; bob's own go where he may put them.
    alices = people.add_experiment(owner="alice")
    assert people.call("alice", "POST", f"/experiments/{alices}/move", json=into_hers).status_code == 200
    assert people.call("admin", "POST", f"/experiments/{bobs}/move", json=into_hers).status_code == 200
    assert _experiment_ids(people, "admin", project["id"]) == [bobs, alices]
    back = {"workspace": "Uncategorized", "project": "Uncategorized"}
    assert people.call("bob", "POST", f"/experiments/{bobs}/move", json=back).status_code == 200
    # Moving still needs the right to change the experiment, even into one's own project.
    theirs = people.call("alice", "POST", f"/experiments/{bobs}/move", json=into_hers)
    assert theirs.status_code == 403 and "it belongs to 'bob'" in theirs.json()["detail"]
