"""Workspaces and projects (Determined's ``det workspace``, ``det project``, ``det e move``).

A workspace holds projects; a project holds experiments and its Markdown notes. They only group:
who may read or change an experiment is still decided on its DAG (master/authz.py), so a project's
list of experiments shows each caller the experiments they may read. Creating a workspace is for
admins; creating a project needs the right to create DAG runs (what creating an experiment needs).
A project is its creator's: editing it (its description and notes) and filing experiments into it
(moving one there, or creating one whose config names it) need the right to create DAG runs and
being the project's owner, its workspace's owner, or an admin; moving an experiment also needs the
right to change it (its owner or an admin). The Uncategorized project is everyone's place to file
into and only admins' to edit.

Archiving, renaming and deleting follow Determined: the project's owner, its workspace's owner or
an admin archives, renames or deletes a project; a workspace's owner or an admin does the same to
a workspace. The Uncategorized workspace and project are never archived, renamed or deleted. An
archived workspace takes no new projects; an archived project (or one in an archived workspace)
takes no new experiments and no edits until it is unarchived. Where Determined's delete also deletes
the experiments inside, ours refuses while the project (or any project of the workspace) still holds
one, naming them: they are moved (``det e move``) or deleted (``det e delete``, with its own checks
of who may) first, so a delete never takes an experiment with it, least of all another user's; a
workspace that holds models is refused too, as Determined refuses it. Tasks (a generic task created
with ``--project_id``) are not what a delete is refused for, as in Determined, where a task's project
only chooses its workspace when it is created and a project delete looks at experiments alone: the
delete moves them to the Uncategorized project (where a task that names no project is filed), so no
stored task is lost or left in a project that no longer exists.

An experiment whose config names no workspace and project lives in the Uncategorized project of the
Uncategorized workspace, as in Determined; one that names a project that does not exist is refused,
as Determined does. ``det_experiments.project_id`` is None for the Uncategorized project, so the
experiments stored before projects existed are already in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, func, select

from det_airflow.config import read_yaml
from det_airflow.errors import DetError
from det_airflow.master import experiments, schema, serialize
from det_airflow.master.authz import Caller, PermissionDenied, check_change, readable
from det_airflow.master.lifecycle import NotFound, StateError, now
from det_airflow.states import ExperimentState
from det_airflow.text_input import name_problem

MAX_NAME = 256
_ACTIVE = (ExperimentState.ACTIVE, ExperimentState.PAUSED)


class ProjectError(DetError):
    """A workspace or project name, or a placement, that the master refuses (HTTP 400)."""


def check_name(kind: str, name: str) -> str:
    if problem := name_problem(name):
        raise ProjectError(f"{kind} name {name!r} {problem}")
    if not 0 < len(name) <= MAX_NAME or name != name.strip():
        raise ProjectError(
            f"{kind} name {name!r}: 1 to {MAX_NAME} characters, no control characters or spaces at either end"
        )
    return name


def get_workspace(conn: Connection, workspace_id: int, *, lock: bool = False, share: bool = False) -> Row:
    """``lock``: held for the rest of the transaction (PostgreSQL) by the one changing it;
    ``share``: by one that depends on it, so that an archive or delete waits for it."""
    query = select(schema.workspaces).where(schema.workspaces.c.id == workspace_id)
    row = conn.execute(query.with_for_update(read=share) if lock or share else query).first()
    if row is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return row


def get_project(conn: Connection, project_id: int, *, lock: bool = False, share: bool = False) -> Row:
    """``lock`` and ``share`` as for ``get_workspace``."""
    query = select(schema.projects).where(schema.projects.c.id == project_id)
    row = conn.execute(query.with_for_update(read=share) if lock or share else query).first()
    if row is None:
        raise NotFound(f"project {project_id} not found")
    return row


def _workspace_named(conn: Connection, name: str) -> Row | None:
    return conn.execute(select(schema.workspaces).where(schema.workspaces.c.name == name)).first()


def _project_named(conn: Connection, workspace_id: int, name: str) -> Row | None:
    p = schema.projects.c
    return conn.execute(select(schema.projects).where(p.workspace_id == workspace_id, p.name == name)).first()


def find_project(conn: Connection, workspace: str, project: str) -> Row:
    """Project ``project`` of workspace ``workspace``, or an error saying how to make the one missing."""
    found = _workspace_named(conn, workspace)
    if found is None:
        raise ProjectError(
            f"workspace '{workspace}' not found; an admin creates it with `det workspace create {workspace}`"
        )
    row = _project_named(conn, found.id, project)
    if row is None:
        raise ProjectError(
            f"project '{project}' not found in workspace '{workspace}'; "
            f"create it with `det project create {workspace} {project}`"
        )
    return row


def _open_project(conn: Connection, workspace: str, project: str) -> Row:
    """Project ``project`` of ``workspace`` locked (PostgreSQL) for the transaction that files an
    experiment into it, refused when it or its workspace is archived: an archive or delete of it
    waits for that transaction, or that transaction sees it archived or gone."""
    row = get_project(conn, find_project(conn, workspace, project).id, share=True)
    _check_open(conn, row)
    return row


def _check_open(conn: Connection, project: Row) -> None:
    """Refuse a change in an archived project or in a project of an archived workspace."""
    workspace = get_workspace(conn, project.workspace_id)
    where = f"project '{project.name}' of workspace '{workspace.name}'"
    if workspace.archived:
        raise ProjectError(
            f"{where}: the workspace is archived; unarchive it first "
            f"(`det workspace unarchive {workspace.name}`)"
        )
    if project.archived:
        raise ProjectError(
            f"{where} is archived; unarchive it first (`det project unarchive {workspace.name} {project.name}`)"
        )


def _uncategorized_id(conn: Connection) -> int:
    w, p = schema.workspaces.c, schema.projects.c
    project_id = conn.execute(
        select(p.id)
        .join(schema.workspaces, w.id == p.workspace_id)
        .where(w.name == schema.UNCATEGORIZED, p.name == schema.UNCATEGORIZED)
    ).scalar()
    if project_id is None:  # a bug: the tables are made with it
        raise NotFound("the Uncategorized project is missing")
    return int(project_id)


def project_id_for(conn: Connection, workspace: str | None, project: str | None) -> int | None:
    """The ``project_id`` an experiment whose config names ``workspace`` and ``project`` is stored
    with; None (the Uncategorized project) when it names neither."""
    if workspace is None or project is None:
        return None
    row = _open_project(conn, workspace, project)
    return None if row.id == _uncategorized_id(conn) else int(row.id)


def _stored_id(conn: Connection, project: Row) -> int | None:
    return None if project.id == _uncategorized_id(conn) else int(project.id)


def _in_project(conn: Connection, project: Row) -> Any:
    """A WHERE clause that keeps the experiments of ``project``."""
    column = schema.experiments.c.project_id
    return column.is_(None) if _stored_id(conn, project) is None else column == project.id


def placements(conn: Connection, rows: Sequence[Row]) -> dict[int, tuple[int, int]]:
    """Experiment ID → (project ID, workspace ID) for experiment ``rows``, in two queries at most;
    a stored ``project_id`` None is the Uncategorized project's real ID, as answers show it."""
    if not rows:
        return {}
    uncategorized = _uncategorized_id(conn) if any(r.project_id is None for r in rows) else None
    project_of = {r.id: r.project_id if r.project_id is not None else uncategorized for r in rows}
    p = schema.projects.c
    query = select(p.id, p.workspace_id).where(p.id.in_(set(project_of.values())))
    workspace_of = {row.id: row.workspace_id for row in conn.execute(query)}
    return {
        experiment_id: (project_id, workspace_of[project_id])
        for experiment_id, project_id in project_of.items()
        if project_id is not None
    }


def placement(conn: Connection, row: Row) -> tuple[int, int]:
    """(project ID, workspace ID) of experiment ``row``."""
    return placements(conn, [row])[row.id]


def experiment_answers(
    conn: Connection, rows: Sequence[Row], *, best_validation: Mapping[int, float | None] | None = None
) -> list[dict[str, Any]]:
    """Experiment ``rows`` as every answer shows them: each with its count of trials and its project
    and workspace; ``best_validation`` (experiment ID → value): where the caller computed it."""
    placed = placements(conn, rows)
    counts = experiments.trial_counts(conn, [row.id for row in rows])
    best = best_validation or {}
    return [
        serialize.experiment(
            row,
            num_trials=counts[row.id],
            best_validation=best.get(row.id),
            placement=placed[row.id],
        )
        for row in rows
    ]


def experiment_answer(conn: Connection, row: Row) -> dict[str, Any]:
    """Experiment ``row`` as every answer shows it (:func:`experiment_answers`)."""
    return experiment_answers(conn, [row])[0]


# --- workspaces -----------------------------------------------------------------------------------


def list_workspaces(conn: Connection, *, name: str | None = None, archived: bool | None = None) -> list[Row]:
    """Every workspace, or the one named ``name``; ``archived``: only those archived (True) or not."""
    query = select(schema.workspaces).order_by(schema.workspaces.c.id)
    if name is not None:
        query = query.where(schema.workspaces.c.name == name)
    if archived is not None:
        query = query.where(schema.workspaces.c.archived.is_(archived))
    return list(conn.execute(query).all())


def describe_workspaces(conn: Connection, rows: Sequence[Row]) -> list[dict[str, Any]]:
    p = schema.projects.c
    query = select(p.workspace_id, func.count()).group_by(p.workspace_id)
    counts: dict[int, int] = {workspace_id: count for workspace_id, count in conn.execute(query)}
    return [
        {
            "id": row.id,
            "name": row.name,
            "created_by": row.created_by,
            "created_at": serialize.iso(row.created_at),
            "archived": row.archived,
            "num_projects": counts.get(row.id, 0),
        }
        for row in rows
    ]


def create_workspace(conn: Connection, caller: Caller, name: str) -> Row:
    check_name("workspace", name)
    if not caller.is_admin:
        raise PermissionDenied(f"user '{caller.name}' may not create workspace '{name}': only admins may")
    if _workspace_named(conn, name) is not None:
        raise ProjectError(f"a workspace named '{name}' already exists")
    result = conn.execute(
        schema.workspaces.insert().values(name=name, created_by=caller.name, created_at=now(), archived=False)
    )
    return get_workspace(conn, int(result.inserted_primary_key[0]))  # type: ignore[index]


def _check_may_manage_workspace(caller: Caller, workspace: Row, what: str) -> None:
    """Refuse unless the caller may create DAG runs and made the workspace, or is an admin."""
    _check_may_edit(caller, what)
    if caller.is_admin or caller.name == workspace.created_by:
        return
    raise PermissionDenied(
        f"user '{caller.name}' may not {what}: it belongs to '{workspace.created_by}'; only they or an admin may"
    )


def set_workspace_archived(conn: Connection, caller: Caller, workspace_id: int, archived: bool) -> Row:
    row = get_workspace(conn, workspace_id, lock=True)
    verb = "archive" if archived else "unarchive"
    if row.name == schema.UNCATEGORIZED:
        raise ProjectError(f"the {schema.UNCATEGORIZED} workspace is the default one: it cannot be {verb}d")
    _check_may_manage_workspace(caller, row, f"{verb} workspace '{row.name}'")
    conn.execute(schema.workspaces.update().where(schema.workspaces.c.id == row.id).values(archived=archived))
    return get_workspace(conn, workspace_id)


def rename_workspace(conn: Connection, caller: Caller, workspace_id: int, name: str) -> Row:
    row = get_workspace(conn, workspace_id, lock=True)
    check_name("workspace", name)
    if row.name == schema.UNCATEGORIZED:
        raise ProjectError(f"the {schema.UNCATEGORIZED} workspace is the default one: it cannot be renamed")
    _check_may_manage_workspace(caller, row, f"rename workspace '{row.name}'")
    if row.archived:
        raise ProjectError(
            f"workspace '{row.name}' is archived; unarchive it first (`det workspace unarchive {row.name}`)"
        )
    if name != row.name:
        if _workspace_named(conn, name) is not None:
            raise ProjectError(f"a workspace named '{name}' already exists")
        conn.execute(schema.workspaces.update().where(schema.workspaces.c.id == row.id).values(name=name))
    return get_workspace(conn, workspace_id)


def delete_workspace(conn: Connection, caller: Caller, workspace_id: int) -> dict[str, Any]:
    """Delete the workspace and its projects, refused while any of them holds an experiment; their
    tasks move to the Uncategorized project. Answers the workspace as it was."""
    row = get_workspace(conn, workspace_id, lock=True)
    if row.name == schema.UNCATEGORIZED:
        raise ProjectError(f"the {schema.UNCATEGORIZED} workspace is the default one: it cannot be deleted")
    _check_may_manage_workspace(caller, row, f"delete workspace '{row.name}'")
    p = schema.projects.c
    held = conn.execute(
        select(p.id, p.name).where(p.workspace_id == row.id).order_by(p.id).with_for_update()
    ).all()
    counts = [(name, _count(conn, project_id)) for project_id, name in held]
    full = [f"'{name}' ({count})" for name, count in counts if count]
    if full:
        raise StateError(
            f"workspace '{row.name}' still holds experiments, in project(s) {', '.join(full)}: "
            "move them (`det e move`) or delete them (`det e delete`) first"
        )
    m = schema.models.c
    models = list(conn.execute(select(m.name).where(m.workspace_id == row.id).order_by(m.name)).scalars())
    if models:  # as Determined: a workspace's models are moved or deleted first, never with it
        shown = ", ".join(f"'{name}'" for name in models[:10]) + (", ..." if len(models) > 10 else "")
        raise StateError(
            f"workspace '{row.name}' still holds {len(models)} model(s) ({shown}): move them "
            "(`det model move NAME -w WORKSPACE`) or delete them (`det model delete NAME`) first"
        )
    described = describe_workspaces(conn, [row])[0]
    _move_tasks_to_uncategorized(conn, [project_id for project_id, _ in held])
    conn.execute(schema.projects.delete().where(p.workspace_id == row.id))
    conn.execute(schema.workspaces.delete().where(schema.workspaces.c.id == row.id))
    return described


def _count(conn: Connection, project_id: int) -> int:
    """How many experiments (any state, archived or not, anyone's; not tasks) project ``project_id`` holds."""
    e = schema.experiments.c
    query = select(func.count()).where(e.project_id == project_id, experiments.not_a_task())
    return int(conn.execute(query).scalar_one())


def _move_tasks_to_uncategorized(conn: Connection, project_ids: Sequence[int]) -> None:
    """File the tasks of projects about to be deleted in the Uncategorized project (project_id None)."""
    if not project_ids:
        return
    e = schema.experiments.c
    conn.execute(
        schema.experiments.update()
        .where(e.project_id.in_(list(project_ids)), e.id.in_(select(schema.tasks.c.id)))
        .values(project_id=None)
    )


# --- projects -------------------------------------------------------------------------------------


def list_projects(
    conn: Connection, workspace: Row, *, name: str | None = None, archived: bool | None = None
) -> list[Row]:
    p = schema.projects.c
    query = select(schema.projects).where(p.workspace_id == workspace.id).order_by(p.id)
    if name is not None:
        query = query.where(p.name == name)
    if archived is not None:
        query = query.where(p.archived.is_(archived))
    return list(conn.execute(query).all())


def describe_projects(conn: Connection, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The projects with their workspace's name and how many experiments (and active ones) they hold."""
    e = schema.experiments.c
    uncategorized = _uncategorized_id(conn)
    counts: dict[int, list[int]] = {}
    query = (
        select(e.project_id, e.state, func.count())
        .where(experiments.not_a_task())
        .group_by(e.project_id, e.state)
    )
    for project_id, state, count in conn.execute(query):
        tally = counts.setdefault(uncategorized if project_id is None else project_id, [0, 0])
        tally[0] += count
        tally[1] += count if state in _ACTIVE else 0
    names = dict(conn.execute(select(schema.workspaces.c.id, schema.workspaces.c.name)).all())
    return [
        {
            "id": row.id,
            "name": row.name,
            "workspace_id": row.workspace_id,
            "workspace_name": names.get(row.workspace_id, ""),
            "description": row.description,
            "notes": row.notes,
            "created_by": row.created_by,
            "created_at": serialize.iso(row.created_at),
            "archived": row.archived,
            "num_experiments": counts.get(row.id, [0, 0])[0],
            "num_active_experiments": counts.get(row.id, [0, 0])[1],
        }
        for row in rows
    ]


def describe_project(conn: Connection, row: Row) -> dict[str, Any]:
    return describe_projects(conn, [row])[0]


def _check_may_edit(caller: Caller, what: str) -> None:
    if not caller.may_create_runs():
        raise PermissionDenied(f"user '{caller.name}' may not {what}: needs the right to create DAG runs")


def _check_may_manage(conn: Connection, caller: Caller, project: Row, what: str) -> None:
    """Refuse unless the caller may create DAG runs and owns the project or its workspace, or is an
    admin. The Uncategorized workspace and project are nobody's: admins'."""
    _check_may_edit(caller, what)
    if caller.is_admin:
        return
    if _stored_id(conn, project) is None:
        raise PermissionDenied(f"user '{caller.name}' may not {what}: the Uncategorized project is admins'")
    workspace = get_workspace(conn, project.workspace_id)
    owners = [project.created_by]
    if workspace.name != schema.UNCATEGORIZED:
        owners.append(workspace.created_by)
    if caller.name in owners:
        return
    whose = f"it belongs to '{project.created_by}'"
    if len(owners) > 1:
        whose += f", its workspace '{workspace.name}' to '{workspace.created_by}'"
    raise PermissionDenied(f"user '{caller.name}' may not {what}: {whose}; only they or an admin may")


def check_may_file_into(conn: Connection, caller: Caller, project: Row, what: str) -> None:
    """Refuse unless the caller may put experiments in ``project``: anyone in Uncategorized."""
    if _stored_id(conn, project) is not None:
        _check_may_manage(conn, caller, project, what)


def check_config_placement(conn: Connection, caller: Caller, config_text: str) -> None:
    """Refuse a submitted config whose ``workspace``/``project`` name a project the caller may not
    file into. A config that does not parse, or names no project, is left to the config's checks."""
    try:
        raw = read_yaml(config_text, source_name="config")
    except DetError:
        return
    if isinstance(raw, dict):
        check_placement(conn, caller, raw.get("workspace"), raw.get("project"))


def check_placement(conn: Connection, caller: Caller, workspace: Any, project: Any) -> None:
    """Refuse an experiment named into project ``project`` of ``workspace`` that the caller may not
    file into; names that are missing or not text are left to the config's checks."""
    if not isinstance(workspace, str) or not isinstance(project, str):
        return
    try:
        target = find_project(conn, workspace, project)
    except ProjectError:  # the config's own check says how to make it
        return
    check_may_file_into(
        conn, caller, target, f"create experiments in project '{project}' of workspace '{workspace}'"
    )


def create_project(conn: Connection, caller: Caller, workspace: Row, fields: dict[str, Any]) -> Row:
    name = check_name("project", fields["name"])
    _check_may_edit(caller, f"create project '{name}'")
    workspace = get_workspace(conn, workspace.id, share=True)  # not archived or deleted meanwhile
    if workspace.archived:
        raise ProjectError(
            f"workspace '{workspace.name}' is archived and takes no new projects; "
            f"unarchive it first (`det workspace unarchive {workspace.name}`)"
        )
    if _project_named(conn, workspace.id, name) is not None:
        raise ProjectError(f"a project named '{name}' already exists in workspace '{workspace.name}'")
    result = conn.execute(
        schema.projects.insert().values(
            workspace_id=workspace.id,
            name=name,
            description=fields.get("description") or "",
            notes=fields.get("notes") or "",
            created_by=caller.name,
            created_at=now(),
            archived=False,
        )
    )
    return get_project(conn, int(result.inserted_primary_key[0]))  # type: ignore[index]


def update_project(conn: Connection, caller: Caller, project_id: int, changes: dict[str, Any]) -> Row:
    """Change ``name``, ``description`` and ``notes`` (those given); not in an archived project or
    workspace, and never the Uncategorized project's name."""
    row = get_project(conn, project_id, lock=True)
    name = changes.get("name")
    if name is not None:
        check_name("project", name)
        if name != row.name and _stored_id(conn, row) is None:
            raise ProjectError(f"the {schema.UNCATEGORIZED} project is the default one: it cannot be renamed")
    _check_may_manage(conn, caller, row, f"edit project '{row.name}'")
    _check_open(conn, row)
    if name is not None and name != row.name and _project_named(conn, row.workspace_id, name) is not None:
        workspace = get_workspace(conn, row.workspace_id)
        raise ProjectError(f"a project named '{name}' already exists in workspace '{workspace.name}'")
    if changes:
        conn.execute(schema.projects.update().where(schema.projects.c.id == row.id).values(**changes))
    return get_project(conn, project_id)


def set_project_archived(conn: Connection, caller: Caller, project_id: int, archived: bool) -> Row:
    """Archive or unarchive the project: not the Uncategorized one, not in an archived workspace
    (as Determined: unarchive the workspace first)."""
    row = get_project(conn, project_id, lock=True)
    verb = "archive" if archived else "unarchive"
    if _stored_id(conn, row) is None:
        raise ProjectError(f"the {schema.UNCATEGORIZED} project is the default one: it cannot be {verb}d")
    _check_may_manage(conn, caller, row, f"{verb} project '{row.name}'")
    workspace = get_workspace(conn, row.workspace_id)
    if workspace.archived:
        raise ProjectError(
            f"project '{row.name}' belongs to archived workspace '{workspace.name}'; "
            f"unarchive the workspace first (`det workspace unarchive {workspace.name}`)"
        )
    conn.execute(schema.projects.update().where(schema.projects.c.id == row.id).values(archived=archived))
    return get_project(conn, project_id)


def delete_project(conn: Connection, caller: Caller, project_id: int) -> dict[str, Any]:
    """Delete the project, refused while it holds an experiment; its tasks move to the Uncategorized
    project. Answers it as it was."""
    row = get_project(conn, project_id, lock=True)
    if _stored_id(conn, row) is None:
        raise ProjectError(f"the {schema.UNCATEGORIZED} project is the default one: it cannot be deleted")
    _check_may_manage(conn, caller, row, f"delete project '{row.name}'")
    described = describe_project(conn, row)
    e = schema.experiments.c
    query = select(e.id).where(e.project_id == row.id, experiments.not_a_task()).order_by(e.id)
    held = list(conn.execute(query).scalars())
    if held:
        shown = ", ".join(str(i) for i in held[:10]) + (", ..." if len(held) > 10 else "")
        raise StateError(
            f"project '{row.name}' of workspace '{described['workspace_name']}' still holds "
            f"{len(held)} experiment(s) ({shown}): move them (`det e move`) or delete them "
            "(`det e delete`) first"
        )
    _move_tasks_to_uncategorized(conn, [row.id])
    conn.execute(schema.projects.delete().where(schema.projects.c.id == row.id))
    return described


def project_experiments(conn: Connection, caller: Caller, project: Row, *, archived: bool) -> list[Row]:
    """The project's experiments the caller may read, archived ones only when ``archived``."""
    e = schema.experiments
    query = select(e).where(_in_project(conn, project), experiments.not_a_task()).order_by(e.c.id)
    if not archived:
        query = query.where(e.c.archived.is_(False))
    return readable(caller, conn.execute(query).all())


def move_experiment(
    conn: Connection, caller: Caller, experiment_id: int, workspace: str, project: str
) -> Row:
    """Put the experiment in ``project`` of ``workspace``; answers the project."""
    row = experiments.get_experiment(conn, experiment_id, lock=True)
    if experiments.task_ids(conn, [experiment_id]):
        raise NotFound(f"experiment {experiment_id} not found")
    check_change(caller, row, "move")
    target = find_project(conn, workspace, project)
    check_may_file_into(
        conn,
        caller,
        target,
        f"move experiment {experiment_id} into project '{project}' of workspace '{workspace}'",
    )
    target = _open_project(conn, workspace, project)
    if row.state in (ExperimentState.DELETING, ExperimentState.DELETED):
        raise ProjectError(f"experiment {experiment_id} is being deleted")
    conn.execute(
        schema.experiments.update()
        .where(schema.experiments.c.id == experiment_id)
        .values(project_id=_stored_id(conn, target))
    )
    return target
