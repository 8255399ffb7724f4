"""`det model delete` and `det model move` (and the workspace of `det model create -w`, `list -w`,
`describe`) against the master's own routes (the people app on SQLite, served on loopback): what a
user sees moved and deleted, and what is refused."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.cli.test_model_verbs import UUID, _checkpoint
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


def _as(cluster: Cluster, user: str, method: str, path: str, **kwargs: Any) -> Any:
    """A call to the master as ``user`` logs in here (``Bearer <user>-token``)."""
    headers = {"Authorization": f"Bearer {user}-token"}
    return cluster.people.call(None, method, path, headers=headers, **kwargs)


def _workspace(cluster: Cluster, name: str, *, archived: bool = False) -> int:
    made = _as(cluster, "admin", "POST", "/workspaces", json={"name": name})
    assert made.status_code == 200, made.text
    workspace_id = int(made.json()["workspace"]["id"])
    if archived:
        answer = _as(cluster, "admin", "POST", f"/workspaces/{workspace_id}/archive")
        assert answer.status_code == 200, answer.text
    return workspace_id


def _workspace_of(det: Any, name: str, *extra: str) -> str:
    header, rows = _table(det("model", "describe", name, *extra).out.split("\n\n")[0])
    return rows[0][header.index("Workspace ID")]


def test_a_model_is_moved_and_shown_in_its_workspace(det: Any, cluster: Cluster) -> None:
    vision = _workspace(cluster, "vision")
    assert det("model", "create", "mnist").code == 0
    assert _workspace_of(det, "mnist") == "1", "the Uncategorized workspace's"
    moved = det("model", "move", "mnist", "vision")
    assert (moved.code, moved.out, moved.err) == (0, "", "")
    assert _workspace_of(det, "mnist") == str(vision)
    header, rows = _table(det("model", "list", "-w", "vision").out)
    assert [row[header.index("Workspace ID")] for row in rows] == [str(vision)]
    assert _table(det("model", "list", "--workspace-names", "Uncategorized").out)[1] == []
    # Determined's own form, -w; back to Uncategorized.
    assert det("model", "move", "mnist", "-w", "Uncategorized").code == 0
    assert json.loads(det("model", "describe", "mnist", "--json").out)["workspace_name"] == "Uncategorized"
    made = det("model", "create", "resnet", "-w", "vision")
    assert made.code == 0 and _workspace_of(det, "resnet") == str(vision)


def test_a_model_and_its_versions_are_deleted(det: Any, cluster: Cluster) -> None:
    _checkpoint(cluster)
    assert det("model", "create", "mnist").code == 0
    assert det("model", "register-version", "mnist", UUID).code == 0
    deleted = det("model", "delete", "mnist")
    assert (deleted.code, deleted.out, deleted.err) == (0, "", "")
    gone = det("model", "describe", "mnist")
    assert gone.code == 1 and "model 'mnist' not found" in gone.err
    assert _table(det("model", "list").out)[1] == []
    # The checkpoint is no longer kept for it: registered again, as version 1 of a new model.
    assert det("model", "create", "again").code == 0
    assert det("model", "register-version", "again", UUID).code == 0
    assert det("model", "delete", "again", "--yes").code == 0, "--yes, as scripts pass it, is taken"


def test_only_its_owner_or_an_admin_moves_or_deletes_it(det: Any, cluster: Cluster) -> None:
    _workspace(cluster, "vision")
    assert det("model", "create", "mnist").code == 0
    cluster.login("bob")
    refused = det("model", "delete", "mnist")
    assert refused.code == 1
    assert refused.err == (
        "Error: permission denied: user 'bob' may not delete model 'mnist': it belongs to 'alice'; "
        "only its owner or an admin may\n"
    )
    refused = det("model", "move", "mnist", "vision")
    assert refused.code == 1
    assert "user 'bob' may not move model 'mnist': it belongs to 'alice'" in refused.err
    cluster.login("alice")
    assert _workspace_of(det, "mnist") == "1", "nothing was moved"
    cluster.login("admin")
    assert det("model", "move", "mnist", "vision", "--owner", "alice").code == 0
    assert det("model", "delete", "mnist", "--owner", "alice").code == 0


def test_bad_input_gets_one_clear_line(det: Any, cluster: Cluster) -> None:
    _workspace(cluster, "old", archived=True)
    _workspace(cluster, "vision")
    assert det("model", "create", "mnist").code == 0
    cases = {
        ("model", "delete", "nope"): "model 'nope' not found",
        ("model", "move", "nope", "vision"): "model 'nope' not found",
        ("model", "move", "mnist", "nowhere"): "workspace 'nowhere' not found",
        ("model", "move", "mnist", "old"): "workspace 'old' is archived: cannot move model 'mnist' into it",
        ("model", "create", "other", "-w", "old"): "workspace 'old' is archived: cannot create model 'other'",
        ("model", "move", "mnist"): "give the workspace to move it to: det model move NAME -w WORKSPACE_NAME",
        ("model", "move", "mnist", "vision", "-w", "old"): "two workspaces given ('vision' and -w 'old')",
    }
    for argv, message in cases.items():
        result = det(*argv)
        assert result.code == 1, argv
        assert message in result.err and result.err.count("\n") == 1, (argv, result.err)
    assert _workspace_of(det, "mnist") == "1", "nothing was moved"
    assert [row[1] for row in _table(det("model", "list").out)[1]] == ["mnist"]
    assert _as(cluster, "alice", "POST", "/models/mnist/archive").status_code == 200
    archived = det("model", "move", "mnist", "vision")
    assert archived.code == 1 and "model 'mnist' is archived: unarchive it to move it" in archived.err
