"""The ``airflow`` section: det-airflow's own settings, over defaults from ``airflow.cfg [det]``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, item, report_unknown, show
from det_airflow.config._types import AirflowSection

EXECUTORS = ("local", "docker", "kubernetes")
_FIELDS = tuple(f.name for f in dataclasses.fields(AirflowSection))
_PATH = "airflow"
# Fields no airflow.cfg [det] default stands in for: they say what one experiment waits on.
_OWN_FIELDS = frozenset({"schedule"})
_ASSET_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")


def read_airflow(value: Any, problems: Problems, defaults: Mapping[str, Any] | None) -> AirflowSection:
    """Reads the section; keys it does not set come from ``defaults``.

    ``defaults`` may be the whole ``[det]`` section: keys that are not AirflowSection fields are
    ignored, and empty strings count as unset (airflow.cfg cannot write null).
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        problems.add(_PATH, f"expected a mapping, got {show(value)}")
        value = {}
    fallback = {
        k: v
        for k, v in (defaults or {}).items()
        if k in _FIELDS and k not in _OWN_FIELDS and v not in ("", None)
    }
    merged = {**fallback, **{k: v for k, v in value.items() if v is not None}}
    report_unknown(value, _PATH, problems, _FIELDS)
    before = len(problems)
    f = Fields(merged, _PATH, problems)
    d = AirflowSection()
    executor = f.choice("executor", EXECUTORS, d.executor)
    section = AirflowSection(
        executor=executor,
        trial_runner=f.choice("trial_runner", EXECUTORS, executor),
        pool=f.string("pool", d.pool, nonempty=True),
        queue=f.string("queue", d.queue, nonempty=True),
        master_conn_id=f.string("master_conn_id", d.master_conn_id, nonempty=True),
        docker_conn_id=f.string("docker_conn_id", d.docker_conn_id, nonempty=True),
        kubernetes_conn_id=f.string("kubernetes_conn_id", d.kubernetes_conn_id, nonempty=True),
        namespace=f.string("namespace", d.namespace, nonempty=True),
        schedule=_schedule(merged.get("schedule"), problems),
    )
    # A bad default is the platform's mistake, not the YAML author's: say where to fix it.
    for i in range(before, len(problems)):
        path, message = problems.items[i]
        key = path.rpartition(".")[2]
        if key in fallback and key not in value:
            problems.items[i] = (path, f"{message} (the default set in airflow.cfg [det])")
    return section


def _schedule(value: Any, problems: Problems) -> tuple[str, ...]:
    """``schedule``: one Asset URI or a list of them (the DAG runs once every one has a new event)."""
    path = f"{_PATH}.schedule"
    if value is None:
        return ()
    uris = [value] if isinstance(value, str) else value
    if not isinstance(uris, list) or not uris:
        problems.add(path, f"expected an Asset URI or a non-empty list of them, got {show(value)}")
        return ()
    for i, uri in enumerate(uris):
        if not isinstance(uri, str) or not _ASSET_URI.match(uri):
            where = path if isinstance(value, str) else item(path, i)
            problems.add(where, f"expected an Asset URI such as 's3://data/mnist', got {show(uri)}")
    return tuple(dict.fromkeys(u for u in uris if isinstance(u, str)))


def airflow_to_dict(section: AirflowSection) -> dict[str, Any]:
    out = dataclasses.asdict(section)
    # Left out when unset, so configs written before the field existed dump as they did.
    if schedule := out.pop("schedule"):
        out["schedule"] = list(schedule)
    return out
