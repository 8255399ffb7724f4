"""`det project delete` and `det workspace delete` with a generic task filed in the project (`det task
create --project_id`), against the master's own routes served on loopback: as in Determined, only
experiments hold a delete back; the task is kept, moved to the Uncategorized project."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from det_airflow.master import schema
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


def _research_vision_with_a_task(det: Any, cluster: Cluster, tmp_path: Path) -> int:
    """Workspace 'research' (the admin's), project 'vision' (alice's) holding alice's generic task;
    logged in as alice. Answers the task's ID."""
    cluster.login("admin")
    assert det("workspace", "create", "research").code == 0
    cluster.login("alice")
    assert det("project", "create", "research", "vision").code == 0
    with cluster.people.db.read() as conn:
        project = conn.execute(
            select(schema.projects.c.id).where(schema.projects.c.name == "vision")
        ).scalar_one()
    config = tmp_path / "task.yaml"
    config.write_text("entrypoint: echo hi\n")
    made = det("task", "create", str(config), "--project_id", str(project))
    assert made.code == 0, made.err
    task_id = int(made.out.split()[-1])
    assert cluster.people.experiment(task_id).project_id == project
    return task_id


def test_a_project_holding_only_a_task_is_deleted_and_the_task_kept(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    task_id = _research_vision_with_a_task(det, cluster, tmp_path)
    cluster.start(task_id)

    deleted = det("project", "delete", "research", "vision", "--yes")
    assert (deleted.code, deleted.out, deleted.err) == (0, "Successfully deleted project vision.\n", "")
    gone = det("project", "describe", "research", "vision")
    assert (gone.code, gone.err) == (1, "Error: project 'vision' not found in workspace 'research'\n")

    # The task is where a task that names no project is: still running, its config as it was.
    _, rows = _table(det("task", "list").out)
    assert [row[:5] for row in rows] == [[str(task_id), "generic", "echo hi", "alice", "RUNNING"]]
    assert det("task", "config", str(task_id)).out == "entrypoint: echo hi\n"
    assert cluster.people.experiment(task_id).project_id is None
    assert (
        json.loads(det("project", "list-experiments", "Uncategorized", "Uncategorized", "--json").out) == []
    )

    # A project made again under the name starts empty, and goes as easily.
    assert det("project", "create", "research", "vision").code == 0
    _, projects = _table(det("project", "list", "research").out)
    assert [row[1:] for row in projects] == [["vision", "", "0", "0"]]
    again = det("project", "delete", "research", "vision", "--yes")
    assert (again.code, again.err) == (0, "")


def test_only_experiments_hold_a_delete_back_and_the_refusal_names_them(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    task_id = _research_vision_with_a_task(det, cluster, tmp_path)
    project = cluster.people.experiment(task_id).project_id
    experiment_id = cluster.people.add_experiment(owner="alice")
    assert det("e", "move", str(experiment_id), "research", "vision").code == 0

    refused = det("project", "delete", "research", "vision", "--yes")
    assert (refused.code, refused.err) == (
        1,
        f"Error: project 'vision' of workspace 'research' still holds 1 experiment(s) ({experiment_id}): "
        "move them (`det e move`) or delete them (`det e delete`) first\n",
    )
    cluster.login("admin")
    whole = det("workspace", "delete", "research", "--yes")
    assert (whole.code, whole.err) == (
        1,
        "Error: workspace 'research' still holds experiments, in project(s) 'vision' (1): "
        "move them (`det e move`) or delete them (`det e delete`) first\n",
    )
    # Refused: nothing moved.
    assert cluster.people.experiment(task_id).project_id == project
    assert cluster.people.experiment(experiment_id).project_id == project

    assert det("e", "move", str(experiment_id), "Uncategorized", "Uncategorized").code == 0
    deleted = det("workspace", "delete", "research", "--yes")
    assert (deleted.code, deleted.err) == (0, "")
    assert [row[1] for row in _table(det("workspace", "list").out)[1]] == ["Uncategorized"]
    assert cluster.people.experiment(task_id).project_id is None
    _, rows = _table(det("task", "list", "--all").out)
    assert [row[:4] for row in rows] == [[str(task_id), "generic", "echo hi", "alice"]]
