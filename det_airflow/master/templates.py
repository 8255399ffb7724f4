"""Config templates (Determined's ``det template``): named config fragments kept on the master.

A template's name is its owner's: each user has a namespace of their own, and admins keep one of
shared templates. An experiment naming a template gets its owner's own template of that name, else
the shared one, never another user's, so what runs in a trial is only ever its owner's or an
admin's. Whoever may use a template reads it in full (nothing masked: it is what their trial
will get); another user's personal template is not theirs to read, use or change.

An experiment that names a template gets the template laid under its own config when it is created,
by Determined's merge rule: the experiment's values win, mappings merge key by key, and lists are the
experiment's, except ``bind_mounts`` and ``resources.devices`` (the template's entries for other
container paths are added) and ``environment.environment_variables`` (the template's first, so the
experiment's, later, override them). A section whose kind differs (``checkpoint_storage.type``,
``searcher.name``, ``data_layer.type``) takes only the template's fields every kind shares.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from sqlalchemy import Connection, Row, select

from det_airflow.config import read_yaml
from det_airflow.errors import ConfigError, DetError
from det_airflow.master import schema, serialize
from det_airflow.master.authz import Caller, PermissionDenied
from det_airflow.master.lifecycle import NotFound, now
from det_airflow.text_input import NOT_IN_NAMES

MAX_NAME = 256
# The namespace of the shared templates (admins'); a personal template's is its owner's user name.
SHARED = ""
_NAME = re.compile(f"[^/{NOT_IN_NAMES}]+")

# The fields of a section that every kind of it has: all a template of another kind may give.
_SHARED_FIELDS = {
    "checkpoint_storage": ("type", {"save_experiment_best", "save_trial_best", "save_trial_latest"}),
    "searcher": ("name", {"metric", "smaller_is_better", "source_trial_id", "source_checkpoint_uuid"}),
    "data_layer": ("type", set()),
}
_FLAVORS = ("cpu", "cuda", "rocm")


class TemplateError(DetError):
    """A template name or config the master refuses (HTTP 400)."""


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not _NAME.fullmatch(name) or name != name.strip():
        raise TemplateError(
            f"template name {name!r}: 1 to {MAX_NAME} characters, no '/', control or bidirectional-formatting characters, "
            "or spaces at either end"
        )
    return name


def read_config(text: str, *, source: str) -> dict[str, Any]:
    """A config text as a mapping (an empty text is an empty config)."""
    config = read_yaml(text, source_name=source)
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(
            [("", f"a config is a mapping of fields, not {type(config).__name__}")], source=source
        )
    return config


def _in(namespace: str, name: str) -> Any:
    t = schema.templates.c
    return (t.namespace == namespace) & (t.name == name)


def _get(conn: Connection, namespace: str, name: str) -> Row | None:
    return conn.execute(select(schema.templates).where(_in(namespace, name))).first()


def usable(conn: Connection, caller: Caller, name: str) -> Row:
    """The template an experiment of the caller naming ``name`` gets: the caller's own, else the
    shared one; never another user's."""
    row = _get(conn, caller.name, name) or _get(conn, SHARED, name)
    if row is None:
        raise NotFound(f"template '{name}' not found among yours or the shared ones")
    return row


def find_template(
    conn: Connection, caller: Caller, name: str, *, owner: str | None = None, shared: bool = False
) -> Row:
    """The shared template ``name``, the one of ``owner`` (theirs or an admin's to read), or without
    either the one the caller's experiments get."""
    if shared:
        row = _get(conn, SHARED, name)
        if row is None:
            raise NotFound(f"shared template '{name}' not found")
        return row
    if owner is None:
        return usable(conn, caller, name)
    if owner != caller.name and not caller.is_admin:
        raise PermissionDenied(
            f"user '{caller.name}' may not read template '{name}' of '{owner}': a personal template "
            "is its owner's (and admins')"
        )
    return _own(conn, owner, name)


def _own(conn: Connection, owner: str, name: str) -> Row:
    row = _get(conn, owner, name)
    if row is None:
        raise NotFound(f"template '{name}' of '{owner}' not found")
    return row


def list_templates(conn: Connection, caller: Caller) -> list[Row]:
    """The caller's own templates and the shared ones; for an admin, every template."""
    t = schema.templates.c
    query = select(schema.templates).order_by(t.name, t.namespace)
    if not caller.is_admin:
        query = query.where(t.namespace.in_([caller.name, SHARED]))
    return list(conn.execute(query).all())


def describe(row: Row, caller: Caller) -> dict[str, Any]:
    """The template as an answer: in full to those who may use it (its owner, admins, and for a
    shared one whoever may create experiments, whose trials would get its values anyway); with its
    secrets masked to anyone else (a Viewer reading a shared template)."""
    uses_it = row.namespace == caller.name or caller.is_admin or caller.may_create_runs()
    return {
        "name": row.name,
        "owner": row.owner,
        "shared": row.namespace == SHARED,
        "updated_at": row.updated_at.isoformat(),
        "config": row.config if uses_it else serialize.masked_config(row.config),
    }


def set_template(
    conn: Connection, caller: Caller, name: str, config: dict[str, Any], *, shared: bool = False
) -> Row:
    """Create or replace the caller's own template ``name``, or (admins) the shared one."""
    what = f"set {'shared ' if shared else ''}template '{name}'"
    if not caller.may_create_runs():
        raise PermissionDenied(f"user '{caller.name}' may not {what}: needs the right to create DAG runs")
    if shared and not caller.is_admin:
        raise PermissionDenied(f"user '{caller.name}' may not {what}: only admins manage shared templates")
    namespace = SHARED if shared else caller.name
    table = schema.templates
    if _get(conn, namespace, name) is None:
        conn.execute(
            table.insert().values(
                namespace=namespace, name=name, config=config, owner=caller.name, updated_at=now()
            )
        )
    else:  # a shared one stays the admin's who made it
        conn.execute(table.update().where(_in(namespace, name)).values(config=config, updated_at=now()))
    return _own(conn, namespace, name)


def remove_template(conn: Connection, caller: Caller, row: Row) -> None:
    """Remove the template: a personal one by its owner or an admin, a shared one by an admin."""
    if row.namespace == caller.name or caller.is_admin:
        conn.execute(schema.templates.delete().where(_in(row.namespace, row.name)))
        return
    if row.namespace == SHARED:
        raise PermissionDenied(
            f"user '{caller.name}' may not remove shared template '{row.name}': only admins manage "
            "shared templates"
        )
    raise PermissionDenied(
        f"user '{caller.name}' may not remove template '{row.name}': it belongs to '{row.owner}'; "
        "only its owner or an admin may"
    )


def apply(conn: Connection, caller: Caller, name: str, config_text: str) -> str:
    """The experiment's config text with the caller's template ``name`` (their own, else the shared
    one) laid under it, as YAML text."""
    template = usable(conn, caller, name).config
    merged = merge(template, read_config(config_text, source="config"))
    return yaml.safe_dump(merged, sort_keys=False)


def merge(template: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``config`` laid over ``template`` by Determined's rule (see the module's docstring).

    Example:
        >>> merge({"resources": {"slots_per_trial": 2, "priority": 5}}, {"resources": {"priority": 1}})
        {'resources': {'slots_per_trial': 2, 'priority': 1}}
    """
    return _merge_mapping(template, config, ())


def _merge_mapping(template: dict[str, Any], config: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    merged = dict(template)
    for key, value in config.items():
        merged[key] = _merge_value(template.get(key), value, (*path, key))
    return merged


def _merge_value(template: Any, config: Any, path: tuple[str, ...]) -> Any:
    if config is None:  # unset in the experiment: the template's
        return template
    if template is None:
        return config
    if path in (("bind_mounts",), ("resources", "devices")):
        return _append_unique(template, config)
    if path == ("environment", "environment_variables"):
        return _append_variables(template, config)
    if path == ("hyperparameters",) and isinstance(template, dict) and isinstance(config, dict):
        return _merge_hyperparameters(template, config)
    if path == ("environment", "pod_spec"):
        return config
    if isinstance(template, dict) and isinstance(config, dict):
        if len(path) == 1 and path[0] in _SHARED_FIELDS:
            kind, shared = _SHARED_FIELDS[path[0]]
            if config.get(kind) is not None and template.get(kind) not in (None, config.get(kind)):
                template = {k: v for k, v in template.items() if k in shared}
        return _merge_mapping(template, config, path)
    return config


def _container_path(mount: Any) -> Any:
    if isinstance(mount, dict):
        return mount.get("container_path")
    if isinstance(mount, str):  # a device as "host:container[:mode]"
        parts = mount.split(":")
        return parts[1] if len(parts) > 1 else mount
    return None


def _append_unique(template: Any, config: Any) -> Any:
    if not isinstance(template, list) or not isinstance(config, list):
        return config
    taken = {_container_path(item) for item in config}
    return config + [item for item in template if _container_path(item) not in taken]


def _by_flavor(variables: Any) -> dict[str, Any]:
    if isinstance(variables, list):
        return {flavor: list(variables) for flavor in _FLAVORS}
    return dict(variables)


def _append_variables(template: Any, config: Any) -> Any:
    if isinstance(template, list) and isinstance(config, list):
        return template + config
    if not isinstance(template, list | dict) or not isinstance(config, list | dict):
        return config
    ours, theirs = _by_flavor(config), _by_flavor(template)
    merged: dict[str, Any] = {}
    for flavor in [*theirs, *(k for k in ours if k not in theirs)]:
        first, then = theirs.get(flavor) or [], ours.get(flavor) or []
        merged[flavor] = first + then if isinstance(first, list) and isinstance(then, list) else then
    return merged


def _is_nested(hparam: Any) -> bool:
    return isinstance(hparam, dict) and "type" not in hparam


def _merge_hyperparameters(template: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A hyperparameter is the experiment's whole, unless both sides are nested groups."""
    merged = dict(template)
    for key, value in config.items():
        if _is_nested(value) and _is_nested(template.get(key)):
            merged[key] = _merge_hyperparameters(template[key], value)
        elif value is not None:
            merged[key] = value
    return merged
