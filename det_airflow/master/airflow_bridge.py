"""The only place the master reads or changes Airflow's own configuration and tables.

The master runs inside Airflow's API server, which has a database session; task code does not.
"""

from __future__ import annotations

from pathlib import Path

# The file Airflow parses; every experiment YAML becomes a DAG through it.
FACTORY_FILE = "det_experiments.py"
DEFAULT_BUNDLE = "dags-folder"


def conf_get(section: str, key: str, fallback: str | None = None) -> str | None:
    from airflow.configuration import conf

    return conf.get(section, key, fallback=fallback)


def det_defaults() -> dict[str, str]:
    """The `[det]` section of airflow.cfg (defaults for the experiment's `airflow:` section etc.)."""
    from airflow.configuration import conf

    if not conf.has_section("det"):
        return {}
    return {key: str(value) for key, value in (conf.getsection("det") or {}).items()}


def dags_folder() -> Path:
    from airflow.configuration import conf

    return Path(conf.get("core", "dags_folder")).expanduser()


def master_url() -> str:
    """The address trials and tasks use to reach the master."""
    from airflow.configuration import conf

    explicit = conf.get("det", "master_url", fallback=None)
    if explicit:
        return explicit.rstrip("/")
    base = conf.get("api", "base_url", fallback=None)
    if base:
        return base.rstrip("/")
    host = conf.get("api", "host", fallback="127.0.0.1")
    port = conf.get("api", "port", fallback="8080")
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"


def pool_slots(name: str) -> int | None:
    """Slots of an Airflow pool (-1 = unlimited), or None when it does not exist."""
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    with create_session() as session:
        pool = Pool.get_pool(name, session=session)
        return None if pool is None else int(pool.slots)


def request_reparse() -> None:
    """Ask the DAG processor to parse the experiment factory now rather than at its next interval."""
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.utils.session import create_session

    with create_session() as session:
        session.merge(DagPriorityParsingRequest(bundle_name=DEFAULT_BUNDLE, relative_fileloc=FACTORY_FILE))
