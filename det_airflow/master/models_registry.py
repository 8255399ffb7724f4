"""The model registry (Determined's ``det model``): named models whose versions are checkpoints.

Anyone logged in reads the registry, as in Determined, where models are not tied to experiments:
a version shows its checkpoint's trial, step and validation metrics. Creating a model needs the
right to create DAG runs (what creating an experiment needs). A model is its owner's: editing,
renaming, archiving or deleting it, and registering, editing or deleting its versions, need that
right and being the model's owner or an admin; registering a checkpoint also needs read access to
its experiment. A registered checkpoint is kept: garbage collection passes it over, ``det
checkpoint delete`` refuses it, and an experiment with one is not deleted until its versions are.

Model names are unique per owner (Determined scopes them to workspaces; det-airflow's workspaces
have no members, so the owner is the scope): nobody can take or shadow the name of another's
model. A name alone means the caller's own model of that name, else the one model of that name
if only one user has one; with several, the owner must be named, so a model made later under a
name someone already reads by never takes its place silently.

A model lives in a workspace, the Uncategorized one unless created in or moved to another
(``det model create -w``, ``det model move``): its owner or an admin moves it, never into an
archived workspace, as in Determined. ``det_models.workspace_id`` is None for Uncategorized, so
the models stored before workspaces held them are already there.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import Connection, Row, false, func, or_, select
from sqlalchemy.exc import IntegrityError

from det_airflow.errors import DetError
from det_airflow.master import experiments, schema, serialize
from det_airflow.master.authz import Caller, PermissionDenied, check_read
from det_airflow.master.lifecycle import NotFound, StateError, now
from det_airflow.text_input import name_problem

MAX_NAME = 256
SORT_FIELDS = ("name", "description", "creation_time", "last_updated_time")


class ModelError(DetError):
    """A model name or version the registry refuses (HTTP 400)."""


def check_name(name: str) -> str:
    if problem := name_problem(name):
        raise ModelError(f"model name {name!r} {problem}")
    if not 0 < len(name) <= MAX_NAME or "/" in name or name != name.strip() or name.isdigit():
        raise ModelError(
            f"model name {name!r}: 1 to {MAX_NAME} characters, not only digits, no '/', control "
            "characters, or spaces at either end"
        )
    return name


def find_model(conn: Connection, caller: Caller, name: str, *, owner: str | None = None) -> Row:
    """The model ``name`` of ``owner``; without an owner, the model with that ID for a number
    (Determined takes both), else the caller's own model of that name, else the only one."""
    m = schema.models.c
    if owner is not None:
        row = conn.execute(select(schema.models).where(m.owner == owner, m.name == name)).first()
        if row is None:
            raise NotFound(f"model '{name}' of '{owner}' not found")
        return row
    if name.isdigit():
        row = conn.execute(select(schema.models).where(m.id == int(name))).first()
        if row is None:
            raise NotFound(f"model '{name}' not found")
        return row
    rows = conn.execute(select(schema.models).where(m.name == name).order_by(m.owner)).all()
    own = [row for row in rows if row.owner == caller.name]
    if own:
        return own[0]
    if not rows:
        raise NotFound(f"model '{name}' not found")
    if len(rows) > 1:
        owners = ", ".join(f"'{row.owner}'" for row in rows)
        raise ModelError(
            f"model '{name}' is a name of several users' models ({owners}) and not of yours: "
            "say whose (the CLI's --owner, the API's owner parameter) or give its ID"
        )
    return rows[0]


def _by_id(conn: Connection, model_id: int) -> Row:
    return conn.execute(select(schema.models).where(schema.models.c.id == model_id)).one()


def list_models(
    conn: Connection,
    *,
    name: str | None = None,
    owner: str | None = None,
    label: str | None = None,
    archived: bool | None = None,
    workspaces: Iterable[str] | None = None,
    sort_by: str = "last_updated_time",
    descending: bool = False,
) -> list[Row]:
    """The models matching every filter given; ``workspaces``: in any of these (names)."""
    m = schema.models.c
    query = select(schema.models)
    if workspaces is not None:
        names = set(workspaces)
        ids = [row.id for row in _workspaces(conn) if row.name in names]
        in_uncategorized = m.workspace_id.is_(None) if schema.UNCATEGORIZED in names else false()
        query = query.where(or_(m.workspace_id.in_(ids), in_uncategorized))
    if name:
        query = query.where(m.name.icontains(name, autoescape=True))
    if owner is not None:
        query = query.where(m.owner == owner)
    if archived is not None:
        query = query.where(m.archived == archived)
    rows = conn.execute(query.order_by(getattr(m, sort_by), m.id)).all()
    if label:
        rows = [row for row in rows if label in row.labels]
    return list(reversed(rows)) if descending else list(rows)


def _version_counts(conn: Connection, model_ids: Iterable[int]) -> dict[int, int]:
    v = schema.model_versions.c
    counts = conn.execute(
        select(v.model_id, func.count()).where(v.model_id.in_(list(model_ids))).group_by(v.model_id)
    ).all()
    return {model_id: count for model_id, count in counts}


def _workspaces(conn: Connection) -> list[Row]:
    return list(conn.execute(select(schema.workspaces.c.id, schema.workspaces.c.name)).all())


def describe_models(conn: Connection, rows: list[Row]) -> list[dict[str, Any]]:
    counts = _version_counts(conn, [row.id for row in rows])
    names = {row.id: row.name for row in _workspaces(conn)}
    default = next((id_ for id_, name in names.items() if name == schema.UNCATEGORIZED), 0)
    result = []
    for row in rows:
        workspace_id = row.workspace_id if row.workspace_id is not None else default
        result.append(
            {
                **_model(row, counts.get(row.id, 0)),
                "workspace_id": workspace_id,
                "workspace_name": names.get(workspace_id, ""),
            }
        )
    return result


def describe_model(conn: Connection, row: Row) -> dict[str, Any]:
    return describe_models(conn, [row])[0]


def _model(row: Row, num_versions: int) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "notes": row.notes,
        "metadata": row.metadata,
        "labels": row.labels,
        "owner": row.owner,
        "archived": row.archived,
        "creation_time": serialize.iso(row.creation_time),
        "last_updated_time": serialize.iso(row.last_updated_time),
        "num_versions": num_versions,
    }


def _check_may_edit(caller: Caller, what: str) -> None:
    if not caller.may_create_runs():
        raise PermissionDenied(f"user '{caller.name}' may not {what}: needs the right to create DAG runs")


def _check_owner(caller: Caller, owner: str, what: str) -> None:
    _check_may_edit(caller, what)
    if owner != caller.name and not caller.is_admin:
        raise PermissionDenied(
            f"user '{caller.name}' may not {what}: it belongs to '{owner}'; only its owner or an admin may"
        )


def _taken(owner: str, name: str) -> ModelError:
    return ModelError(f"'{owner}' already has a model named '{name}'")


def _check_unique(conn: Connection, owner: str, name: str) -> None:
    m = schema.models.c
    if conn.execute(select(m.id).where(m.owner == owner, m.name == name)).first() is not None:
        raise _taken(owner, name)


def _workspace_id(conn: Connection, name: str, what: str) -> int | None:
    """The ``workspace_id`` stored for a model put in workspace ``name`` (None: Uncategorized);
    a workspace that does not exist or is archived is refused, as in Determined."""
    row = conn.execute(select(schema.workspaces).where(schema.workspaces.c.name == name)).first()
    if row is None:
        raise NotFound(f"workspace '{name}' not found")
    if row.archived:
        raise ModelError(f"workspace '{name}' is archived: cannot {what} into it")
    return None if row.name == schema.UNCATEGORIZED else int(row.id)


def models_in_workspace(conn: Connection, workspace_id: int) -> int:
    """How many models workspace ``workspace_id`` holds: one that holds any is not deleted (its
    models' rows reference it), as in Determined ("move or delete models first")."""
    m = schema.models.c
    return int(conn.execute(select(func.count()).where(m.workspace_id == workspace_id)).scalar() or 0)


def create_model(conn: Connection, caller: Caller, fields: dict[str, Any]) -> Row:
    """A model of the caller's, named in the caller's own namespace, in workspace
    ``workspace_name`` (default: Uncategorized)."""
    fields = dict(fields)
    name = check_name(fields["name"])
    _check_may_edit(caller, f"create model '{name}'")
    _check_unique(conn, caller.name, name)
    workspace = fields.pop("workspace_name", None)
    if workspace is not None:
        fields["workspace_id"] = _workspace_id(conn, workspace, f"create model '{name}'")
    time = now()
    try:
        result = conn.execute(
            schema.models.insert().values(
                **{**fields, "labels": _labels(fields.get("labels", []))},
                owner=caller.name,
                archived=False,
                creation_time=time,
                last_updated_time=time,
            )
        )
    except IntegrityError:  # the same name made at the same moment by another request of the caller
        raise _taken(caller.name, name) from None
    return _by_id(conn, int(result.inserted_primary_key[0]))  # type: ignore[index]


def update_model(
    conn: Connection, caller: Caller, row: Row, changes: dict[str, Any], *, action: str | None = None
) -> Row:
    """Change the fields given (``labels`` and ``metadata`` are replaced whole); ``archived`` too;
    ``workspace_name`` moves it (Determined's ``det model move``). A new name stays in the model's
    owner's namespace."""
    changes = dict(changes)
    renamed = changes.get("name") not in (None, row.name)
    workspace = changes.pop("workspace_name", None)
    moving = workspace is not None
    verb = action or ("rename" if renamed else "move" if moving else "edit")
    _check_owner(caller, row.owner, f"{verb} model '{row.name}'")
    if moving:
        what = f"move model '{row.name}'"
        if row.archived:  # Determined: an archived model's attributes are not updated
            raise ModelError(f"model '{row.name}' is archived: unarchive it to move it")
        changes["workspace_id"] = _workspace_id(conn, workspace, what)
    if renamed:
        _check_unique(conn, row.owner, check_name(changes["name"]))
    if "labels" in changes:
        changes["labels"] = _labels(changes["labels"])
    try:
        conn.execute(
            schema.models.update()
            .where(schema.models.c.id == row.id)
            .values(**changes, last_updated_time=now())
        )
    except IntegrityError:  # renamed at the same moment to a name another request just took
        raise _taken(row.owner, changes["name"]) from None
    return _by_id(conn, row.id)


def delete_model(conn: Connection, caller: Caller, row: Row) -> None:
    """Remove the model and its versions; their checkpoints are no longer kept for it."""
    _check_owner(caller, row.owner, f"delete model '{row.name}'")
    conn.execute(schema.model_versions.delete().where(schema.model_versions.c.model_id == row.id))
    conn.execute(schema.models.delete().where(schema.models.c.id == row.id))


# --- versions -------------------------------------------------------------------------------------


def _versions_query(model_id: int) -> Any:
    v, c = schema.model_versions, schema.checkpoints
    return (
        select(v, *[col.label(f"ckpt__{col.name}") for col in c.columns])
        .join(c, c.c.uuid == v.c.checkpoint_uuid)
        .where(v.c.model_id == model_id)
    )


def list_versions(conn: Connection, model: Row, *, descending: bool = False) -> list[Row]:
    order = schema.model_versions.c.version
    query = _versions_query(model.id).order_by(order.desc() if descending else order)
    return list(conn.execute(query).all())


def get_version(conn: Connection, model: Row, version: int) -> Row:
    """Version ``version`` of the model; 0 or less: the latest (Determined's ``get_version()``)."""
    v = schema.model_versions.c
    query = _versions_query(model.id)
    if version > 0:
        row = conn.execute(query.where(v.version == version)).first()
    else:
        row = conn.execute(query.order_by(v.version.desc()).limit(1)).first()
    if row is None:
        which = f"version {version}" if version > 0 else "any version"
        raise NotFound(f"model '{model.name}' has no {which}")
    return row


def describe_versions(conn: Connection, model: Row, rows: list[Row]) -> list[dict[str, Any]]:
    return [_version(model, row, _validation_metrics(conn, row)) for row in rows]


def _validation_metrics(conn: Connection, row: Row) -> dict[str, Any]:
    mt = schema.metrics.c
    metrics = conn.execute(
        select(mt.metrics)
        .where(
            mt.trial_id == row.ckpt__trial_id,
            mt.group == "validation",
            mt.steps_completed == row.ckpt__steps_completed,
        )
        .order_by(mt.id.desc())
        .limit(1)
    ).scalar()
    return dict(metrics or {})


def _version(model: Row, row: Row, validation: dict[str, Any]) -> dict[str, Any]:
    checkpoint = {col.name: getattr(row, f"ckpt__{col.name}") for col in schema.checkpoints.columns}
    return {
        "id": row.id,
        "model_id": model.id,
        "model_name": model.name,
        "version": row.version,
        "checkpoint": serialize.checkpoint(cast(Row, SimpleNamespace(**checkpoint))),
        "validation_metrics": validation,
        "name": row.name,
        "comment": row.comment,
        "notes": row.notes,
        "metadata": row.metadata,
        "labels": row.labels,
        "owner": row.owner,
        "creation_time": serialize.iso(row.creation_time),
        "last_updated_time": serialize.iso(row.last_updated_time),
    }


def register_version(conn: Connection, caller: Caller, model: Row, fields: dict[str, Any]) -> Row:
    """Register checkpoint ``fields["checkpoint_uuid"]`` as the model's next version."""
    uuid = fields["checkpoint_uuid"]
    _check_owner(caller, model.owner, f"register a version of model '{model.name}'")
    if model.archived:
        raise StateError(f"model '{model.name}' is archived; unarchive it to register new versions")
    checkpoint = conn.execute(select(schema.checkpoints).where(schema.checkpoints.c.uuid == uuid)).first()
    if checkpoint is None:
        raise NotFound(f"checkpoint {uuid} not found")
    check_read(caller, experiments.get_experiment(conn, checkpoint.experiment_id), "register a checkpoint of")
    if checkpoint.state != "COMPLETED":
        raise StateError(
            f"checkpoint {uuid} is {checkpoint.state}; only a COMPLETED checkpoint can be registered"
        )
    v = schema.model_versions.c
    latest = conn.execute(select(func.max(v.version)).where(v.model_id == model.id)).scalar()
    version = (latest or 0) + 1
    time = now()
    conn.execute(
        schema.model_versions.insert().values(
            **{**fields, "labels": _labels(fields.get("labels", []))},
            model_id=model.id,
            version=version,
            owner=caller.name,
            creation_time=time,
            last_updated_time=time,
        )
    )
    conn.execute(schema.models.update().where(schema.models.c.id == model.id).values(last_updated_time=time))
    return get_version(conn, model, version)


def update_version(
    conn: Connection, caller: Caller, model: Row, version: int, changes: dict[str, Any]
) -> Row:
    row = get_version(conn, model, version)
    _check_owner(caller, model.owner, f"edit version {row.version} of model '{model.name}'")
    if "labels" in changes:
        changes["labels"] = _labels(changes["labels"])
    conn.execute(
        schema.model_versions.update()
        .where(schema.model_versions.c.id == row.id)
        .values(**changes, last_updated_time=now())
    )
    return get_version(conn, model, row.version)


def delete_version(conn: Connection, caller: Caller, model: Row, version: int) -> None:
    # The model's owner decides what its versions are, whoever registered one.
    row = get_version(conn, model, version)
    _check_owner(caller, model.owner, f"delete version {row.version} of model '{model.name}'")
    conn.execute(schema.model_versions.delete().where(schema.model_versions.c.id == row.id))


def _labels(labels: Iterable[str]) -> list[str]:
    """Each label once, in the order given."""
    return list(dict.fromkeys(labels))


# --- what the registry keeps ----------------------------------------------------------------------


def registered(conn: Connection, uuids: Iterable[str]) -> dict[str, str]:
    """Of these checkpoints, those registered: uuid → "model 'NAME' version N" (the first)."""
    wanted = list(uuids)
    if not wanted:
        return {}
    v, m = schema.model_versions.c, schema.models.c
    rows = conn.execute(
        select(v.checkpoint_uuid, m.name, v.version)
        .join(schema.models, m.id == v.model_id)
        .where(v.checkpoint_uuid.in_(wanted))
        .order_by(m.name, v.version)
    ).all()
    found: dict[str, str] = {}
    for uuid, model_name, version in rows:
        found.setdefault(uuid, f"model '{model_name}' version {version}")
    return found


def registered_in_experiment(conn: Connection, experiment_id: int) -> dict[str, str]:
    c = schema.checkpoints.c
    uuids = conn.execute(select(c.uuid).where(c.experiment_id == experiment_id)).scalars()
    return registered(conn, uuids)


def check_not_registered(conn: Connection, uuid: str) -> None:
    """Refuse to delete a checkpoint that a model version holds (Determined's rule)."""
    holders = registered(conn, [uuid])
    if holders:
        raise StateError(
            f"checkpoint {uuid} is registered as {holders[uuid]}; delete that version to delete it"
        )
