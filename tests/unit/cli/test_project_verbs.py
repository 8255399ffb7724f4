"""`det workspace ...`, `det project ...` and `det e move` against the master's own routes (the
people app on SQLite, served on loopback): what a user sees made, listed, moved and refused."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


def test_a_workspace_and_project_are_made_and_an_experiment_moved_into_it(det: Any, cluster: Cluster) -> None:
    experiment_id = cluster.people.add_experiment(owner="alice")
    cluster.login("admin")
    made = det("workspace", "create", "research")
    assert made.code == 0, made.err
    assert _table(made.out) == (["ID", "Name", "# Projects"], [["2", "research", "0"]])
    cluster.login("alice")
    project = det("p", "create", "research", "vision", "--description", "image models")
    assert project.code == 0, project.err
    header, rows = _table(project.out)
    assert header == ["ID", "Name", "Description", "# Experiments", "# Active Experiments"]
    assert rows == [["2", "vision", "image models", "0", "0"]]

    moved = det("e", "move", str(experiment_id), "research", "vision")
    assert moved.code == 0, moved.err
    assert moved.out == f'Moved experiment {experiment_id} to project "vision" of workspace "research".\n'

    header, rows = _table(det("w", "list").out)
    assert [row for row in rows] == [["1", "Uncategorized", "1"], ["2", "research", "1"]]
    header, rows = _table(det("project", "list", "research").out)
    assert rows == [["2", "vision", "image models", "1", "1"]]
    listed = det("project", "list-experiments", "research", "vision")
    header, rows = _table(listed.out)
    assert header[:5] == ["ID", "Owner", "Name", "Parent ID", "State"]
    assert [row[:3] for row in rows] == [[str(experiment_id), "alice", "mnist"]]
    described = det("project", "describe", "research", "vision")
    assert described.code == 0 and "Associated Experiments" in described.out
    as_json = json.loads(det("project", "describe", "research", "vision", "--json").out)
    assert (as_json["workspace_name"], as_json["num_experiments"]) == ("research", 1)
    uncategorized = _table(det("project", "list-experiments", "Uncategorized", "Uncategorized").out)[1]
    assert uncategorized == []


def test_list_experiments_shows_others_only_with_all(det: Any, cluster: Cluster) -> None:
    mine = cluster.people.add_experiment(owner="alice")
    theirs = cluster.people.add_experiment(owner="bob")
    own = _table(det("project", "list-experiments", "Uncategorized", "Uncategorized").out)[1]
    assert [row[0] for row in own] == [str(mine)]
    header, every = _table(det("project", "list-experiments", "Uncategorized", "Uncategorized", "--all").out)
    assert header[-1] == "Archived" and [row[0] for row in every] == [str(mine), str(theirs)]


def test_bad_input_gets_one_clear_line(det: Any, cluster: Cluster) -> None:
    experiment_id = cluster.people.add_experiment(owner="bob")
    refused = det("workspace", "create", "research")
    assert refused.code == 1
    assert (
        refused.err
        == "Error: permission denied: user 'alice' may not create workspace 'research': only admins may\n"
    )
    unknown = det("project", "create", "nowhere", "vision")
    assert (unknown.code, unknown.err) == (1, "Error: workspace 'nowhere' not found\n")
    mine = cluster.people.add_experiment(owner="alice")
    missing = det("e", "move", str(mine), "Uncategorized", "vision")
    assert missing.code == 1
    assert missing.err == (
        "Error: project 'vision' not found in workspace 'Uncategorized'; "
        "create it with `det project create Uncategorized vision`\n"
    )
    others = det("e", "move", str(experiment_id), "Uncategorized", "Uncategorized")
    assert others.code == 1 and "it belongs to 'bob'" in others.err and others.err.count("\n") == 1
    usage = det("e", "move", str(experiment_id), "Uncategorized")
    assert usage.code == 2


def test_moving_into_another_users_project_is_refused_in_one_line(det: Any, cluster: Cluster) -> None:
    bobs = cluster.people.add_experiment(owner="bob")
    cluster.login("admin")
    assert det("workspace", "create", "research").code == 0
    cluster.login("alice")
    assert det("p", "create", "research", "vision").code == 0
    cluster.login("bob")
    refused = det("e", "move", str(bobs), "research", "vision")
    assert refused.code == 1
    assert refused.err == (
        f"Error: permission denied: user 'bob' may not move experiment {bobs} into project 'vision' of "
        "workspace 'research': it belongs to 'alice', its workspace 'research' to 'admin'; only they or "
        "an admin may\n"
    )
    header, rows = _table(det("project", "list", "research").out)
    assert rows == [["2", "vision", "", "0", "0"]]
