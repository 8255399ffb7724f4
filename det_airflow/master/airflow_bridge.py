"""The only place the master reads or changes Airflow's own configuration and tables.

The master runs inside Airflow's API server, which has a database session; task code does not.
"""

from __future__ import annotations

from pathlib import Path

from det_airflow.errors import DetError

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
    """Ask the DAG processor to parse the experiment factory now rather than at its next interval.

    Best effort, called after the experiment is committed: the factory is parsed at its next
    interval anyway, so a failure is logged and never turns a stored experiment into an error.
    """
    import logging

    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.utils.session import create_session
    from sqlalchemy.exc import IntegrityError, SQLAlchemyError

    try:
        with create_session() as session:
            session.merge(
                DagPriorityParsingRequest(bundle_name=DEFAULT_BUNDLE, relative_fileloc=FACTORY_FILE)
            )
    except IntegrityError:
        pass  # a concurrent create inserted the same request (its id is the file's hash) first
    except SQLAlchemyError:
        logging.getLogger(__name__).warning(
            "could not ask Airflow to parse %s now; it will at its next interval", FACTORY_FILE, exc_info=True
        )


class AirflowRecordError(DetError):
    """Airflow would not let go of a DAG or DAG run (reported by `det e delete`)."""


def dag_run_state(dag_id: str, run_id: str) -> str | None:
    """The state of a DAG run, or None when Airflow has no such run."""
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    return None if state is None else str(state)


def delete_dag(dag_id: str) -> None:
    """Remove a DAG with its runs and task instances from Airflow (its file must be gone already)."""
    from airflow.api.common.delete_dag import delete_dag as airflow_delete_dag
    from airflow.exceptions import AirflowException, DagNotFound
    from sqlalchemy.exc import SQLAlchemyError

    try:
        airflow_delete_dag(dag_id)
    except DagNotFound:
        pass
    except (AirflowException, SQLAlchemyError) as exc:
        raise AirflowRecordError(f"Airflow DAG '{dag_id}': {exc}") from None
    # delete_dag also clears the import errors of the factory file, which other YAMLs share;
    # a parse now brings back theirs (this DAG's YAML is gone, so not this DAG).
    request_reparse()


def delete_dag_run(dag_id: str, run_id: str) -> None:
    """Remove one DAG run and its task instances, keeping the DAG."""
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with create_session() as session:
            run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
            if run is not None:
                session.delete(run)
    except SQLAlchemyError as exc:
        raise AirflowRecordError(f"Airflow DAG run '{run_id}' of DAG '{dag_id}': {exc}") from None


def trial_work_dir() -> Path:
    """Where local trials get their working directories (`[det] trial_work_dir`)."""
    from det_airflow.operators.trial import default_work_dir

    return default_work_dir()
