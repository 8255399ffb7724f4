"""`det project|workspace archive|unarchive|edit|delete` against the master's own routes (the people
app on SQLite, served on loopback): what a user sees changed, and what is refused, with the message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from det_airflow.master import schema
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import CONFIG, creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here

PROJECT_HEADERS = ["ID", "Name", "Description", "# Experiments", "# Active Experiments"]


def _research_vision(det: Any, cluster: Cluster, *, owner: str = "alice") -> None:
    """Workspace 'research' (the admin's) holding project 'vision' (``owner``'s); logs in as ``owner``."""
    cluster.login("admin")
    assert det("workspace", "create", "research").code == 0
    cluster.login(owner)
    made = det("project", "create", "research", "vision")
    assert made.code == 0, made.err


def _create_in(det: Any, tmp_path: Path, workspace: str, project: str) -> Any:
    config = tmp_path / "const.yaml"
    config.write_text(CONFIG + f"workspace: {workspace}\nproject: {project}\n")
    (tmp_path / "train.py").write_text("print('hi')\n")
    return det("e", "create", str(config), str(tmp_path))


def _experiment_count(cluster: Cluster) -> int:
    with cluster.people.db.read() as conn:
        return len(conn.execute(select(schema.experiments.c.id)).all())


def test_an_archived_project_takes_no_experiments_until_unarchived(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    _research_vision(det, cluster)
    archived = det("project", "archive", "research", "vision")
    assert (archived.code, archived.out, archived.err) == (0, "Successfully archived project vision.\n", "")

    refused = _create_in(det, tmp_path, "research", "vision")
    assert refused.code == 1
    assert refused.err == (
        "Error: project 'vision' of workspace 'research' is archived; unarchive it first "
        "(`det project unarchive research vision`)\n"
    )
    assert _experiment_count(cluster) == 0
    mine = cluster.people.add_experiment(owner="alice")
    moved = det("e", "move", str(mine), "research", "vision")
    assert moved.code == 1 and moved.err == refused.err
    edited = det("project", "edit", "research", "vision", "--description", "later")
    assert edited.code == 1 and edited.err == refused.err
    # Still listed (as Determined's CLI lists archived projects), and --json says it is archived.
    assert [row[1] for row in _table(det("project", "list", "research").out)[1]] == ["vision"]
    assert json.loads(det("project", "describe", "research", "vision", "--json").out)["archived"] is True

    unarchived = det("project", "unarchive", "research", "vision")
    assert (unarchived.code, unarchived.out) == (0, "Successfully un-archived project vision.\n")
    created = _create_in(det, tmp_path, "research", "vision")
    assert created.code == 0, created.err
    header, rows = _table(det("project", "list", "research").out)
    assert (header, rows) == (PROJECT_HEADERS, [["2", "vision", "", "1", "1"]])


def test_an_archived_workspace_takes_no_projects_and_its_projects_no_experiments(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    _research_vision(det, cluster)
    cluster.login("admin")
    archived = det("workspace", "archive", "research")
    assert (archived.code, archived.out) == (0, "Successfully archived workspace research.\n")
    cluster.login("alice")
    no_project = det("project", "create", "research", "nlp")
    assert no_project.code == 1
    assert no_project.err == (
        "Error: workspace 'research' is archived and takes no new projects; "
        "unarchive it first (`det workspace unarchive research`)\n"
    )
    no_experiment = _create_in(det, tmp_path, "research", "vision")
    assert no_experiment.code == 1
    assert no_experiment.err == (
        "Error: project 'vision' of workspace 'research': the workspace is archived; "
        "unarchive it first (`det workspace unarchive research`)\n"
    )
    no_archive = det("project", "archive", "research", "vision")
    assert no_archive.err == (
        "Error: project 'vision' belongs to archived workspace 'research'; "
        "unarchive the workspace first (`det workspace unarchive research`)\n"
    )
    listed = json.loads(det("workspace", "list", "--json").out)
    assert [(w["name"], w["archived"]) for w in listed] == [("Uncategorized", False), ("research", True)]
    refused = det("workspace", "unarchive", "research")
    assert refused.code == 1
    assert refused.err == (
        "Error: permission denied: user 'alice' may not unarchive workspace 'research': it belongs to "
        "'admin'; only they or an admin may\n"
    )
    cluster.login("admin")
    assert det("workspace", "unarchive", "research").out == "Successfully un-archived workspace research.\n"
    cluster.login("alice")
    assert det("project", "create", "research", "nlp").code == 0


def test_edit_renames_a_project_and_a_workspace_with_determineds_flags(det: Any, cluster: Cluster) -> None:
    _research_vision(det, cluster)
    edited = det("project", "edit", "research", "vision", "--new_name", "vision2", "--description", "cnn")
    assert edited.code == 0, edited.err
    assert _table(edited.out) == (PROJECT_HEADERS, [["2", "vision2", "cnn", "0", "0"]])
    taken = det("p", "create", "research", "audio")
    assert taken.code == 0
    clash = det("project", "edit", "research", "audio", "--new_name", "vision2")
    assert (clash.code, clash.err) == (
        1,
        "Error: a project named 'vision2' already exists in workspace 'research'\n",
    )
    cluster.login("admin")
    renamed = det("workspace", "edit", "research", "--name", "lab")
    assert renamed.code == 0, renamed.err
    assert _table(renamed.out) == (["ID", "Name", "# Projects"], [["2", "lab", "2"]])
    as_json = json.loads(det("project", "describe", "lab", "vision2", "--json").out)
    assert (as_json["workspace_name"], as_json["description"]) == ("lab", "cnn")
    bad = det("workspace", "edit", "lab", "--name", " lab ")
    assert bad.code == 1 and bad.err.startswith("Error: ") and bad.err.count("\n") == 1


def test_the_uncategorized_workspace_and_project_are_never_archived_renamed_or_deleted(
    det: Any, cluster: Cluster
) -> None:
    cluster.login("admin")
    expected = {
        (
            "workspace",
            "archive",
        ): "Error: the Uncategorized workspace is the default one: it cannot be archived\n",
        (
            "workspace",
            "delete",
        ): "Error: the Uncategorized workspace is the default one: it cannot be deleted\n",
        (
            "project",
            "archive",
        ): "Error: the Uncategorized project is the default one: it cannot be archived\n",
        ("project", "delete"): "Error: the Uncategorized project is the default one: it cannot be deleted\n",
    }
    for (noun, verb), message in expected.items():
        names = ["Uncategorized"] if noun == "workspace" else ["Uncategorized", "Uncategorized"]
        refused = det(noun, verb, *names, *(["--yes"] if verb == "delete" else []))
        assert (refused.code, refused.err) == (1, message)
    renamed = det("workspace", "edit", "Uncategorized", "--name", "Mine")
    assert renamed.err == "Error: the Uncategorized workspace is the default one: it cannot be renamed\n"
    project = det("project", "edit", "Uncategorized", "Uncategorized", "--new_name", "Mine")
    assert project.err == "Error: the Uncategorized project is the default one: it cannot be renamed\n"
    # Its description stays an admin's to edit, as before.
    described = det("project", "edit", "Uncategorized", "Uncategorized", "--description", "all else")
    assert described.code == 0 and _table(described.out)[1][0][:3] == ["1", "Uncategorized", "all else"]


def test_delete_refuses_a_project_that_holds_experiments_and_loses_none(det: Any, cluster: Cluster) -> None:
    _research_vision(det, cluster)
    cluster.login("bob")
    bobs = cluster.people.add_experiment(owner="bob")
    cluster.login("admin")
    assert det("e", "move", str(bobs), "research", "vision").code == 0
    refused = det("project", "delete", "research", "vision", "--yes")
    assert refused.code == 1
    assert refused.err == (
        f"Error: project 'vision' of workspace 'research' still holds 1 experiment(s) ({bobs}): "
        "move them (`det e move`) or delete them (`det e delete`) first\n"
    )
    whole = det("workspace", "delete", "research", "--yes")
    assert whole.err == (
        "Error: workspace 'research' still holds experiments, in project(s) 'vision' (1): "
        "move them (`det e move`) or delete them (`det e delete`) first\n"
    )
    assert cluster.people.experiment(bobs).project_id is not None  # where it was, nothing lost

    assert det("e", "move", str(bobs), "Uncategorized", "Uncategorized").code == 0
    deleted = det("project", "delete", "research", "vision", "--yes")
    assert (deleted.code, deleted.out, deleted.err) == (0, "Successfully deleted project vision.\n", "")
    assert _table(det("project", "list", "research").out)[1] == []
    gone = det("project", "describe", "research", "vision")
    assert (gone.code, gone.err) == (1, "Error: project 'vision' not found in workspace 'research'\n")
    assert cluster.people.experiment(bobs).owner == "bob"


def test_workspace_delete_takes_its_empty_projects_and_asks_first(det: Any, cluster: Cluster) -> None:
    _research_vision(det, cluster)
    cluster.login("admin")
    unasked = det("workspace", "delete", "research")  # no terminal here to ask at
    assert (unasked.code, unasked.err) == (
        1,
        "Error: not deleting workspace research without confirmation: pass --yes\n",
    )
    deleted = det("workspace", "delete", "research", "--yes")
    assert (deleted.code, deleted.out) == (0, "Successfully deleted workspace research.\n")
    assert [row[1] for row in _table(det("workspace", "list").out)[1]] == ["Uncategorized"]
    with cluster.people.db.read() as conn:
        assert conn.execute(select(schema.projects.c.name)).scalars().all() == ["Uncategorized"]


def test_only_the_owner_of_a_project_or_its_workspace_or_an_admin_may(det: Any, cluster: Cluster) -> None:
    _research_vision(det, cluster)  # alice's project in the admin's workspace
    cluster.login("bob")
    whose = "it belongs to 'alice', its workspace 'research' to 'admin'; only they or an admin may\n"
    for verb, extra in (("archive", []), ("delete", ["--yes"]), ("edit", ["--new_name", "x"])):
        refused = det("project", verb, "research", "vision", *extra)
        action = "edit" if verb == "edit" else verb
        assert (refused.code, refused.err) == (
            1,
            f"Error: permission denied: user 'bob' may not {action} project 'vision': {whose}",
        )
    for verb, extra in (("archive", []), ("delete", ["--yes"]), ("edit", ["--name", "x"])):
        refused = det("workspace", verb, "research", *extra)
        action = "rename" if verb == "edit" else verb
        assert (refused.code, refused.err) == (
            1,
            f"Error: permission denied: user 'bob' may not {action} workspace 'research': it belongs to "
            "'admin'; only they or an admin may\n",
        )
    cluster.login("alice")
    assert det("project", "archive", "research", "vision").code == 0


def test_unknown_names_get_one_clear_line(det: Any, cluster: Cluster) -> None:
    for argv, message in (
        (("project", "archive", "nowhere", "vision"), "Error: workspace 'nowhere' not found\n"),
        (
            ("project", "delete", "Uncategorized", "nope", "--yes"),
            "Error: project 'nope' not found in workspace 'Uncategorized'\n",
        ),
        (
            ("project", "edit", "Uncategorized", "nope", "--new_name", "x"),
            "Error: project 'nope' not found in workspace 'Uncategorized'\n",
        ),
        (("workspace", "unarchive", "nowhere"), "Error: workspace 'nowhere' not found\n"),
        (("workspace", "edit", "nowhere", "--name", "x"), "Error: workspace 'nowhere' not found\n"),
        (("workspace", "delete", "nowhere", "--yes"), "Error: workspace 'nowhere' not found\n"),
    ):
        result = det(*argv)
        assert (result.code, result.out, result.err) == (1, "", message), argv
    usage = det("project", "archive", "Uncategorized")
    assert usage.code == 2


def test_workspace_delete_refuses_one_that_holds_a_model(det: Any, cluster: Cluster) -> None:
    _research_vision(det, cluster)
    assert det("model", "create", "mnist-cnn").code == 0
    assert det("model", "move", "mnist-cnn", "-w", "research").code == 0
    cluster.login("admin")
    refused = det("workspace", "delete", "research", "--yes")
    assert (refused.code, refused.err) == (
        1,
        "Error: workspace 'research' still holds 1 model(s) ('mnist-cnn'): move them "
        "(`det model move NAME -w WORKSPACE`) or delete them (`det model delete NAME`) first\n",
    )
    cluster.login("alice")
    assert det("model", "move", "mnist-cnn", "-w", "Uncategorized").code == 0
    cluster.login("admin")
    assert det("workspace", "delete", "research", "--yes").out == "Successfully deleted workspace research.\n"
