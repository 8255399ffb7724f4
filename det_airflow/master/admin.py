"""`det admin migrate`: create or upgrade the det tables and the service connection, and mask the
secrets in experiment files that older versions wrote in plain text."""

from __future__ import annotations

from det_airflow import settings
from det_airflow.master import airflow_bridge
from det_airflow.master.auth import SERVICE_TOKEN_SETTING, hash_token, new_token
from det_airflow.master.db import Database, get_database, get_setting, set_setting

DEFAULT_CONN_ID = "det_default"


def migrate(*, conn_id: str = DEFAULT_CONN_ID, master_url: str | None = None) -> list[str]:
    """Bring the det schema up to date and make sure det tasks can reach the master."""
    from sqlalchemy.exc import SQLAlchemyError

    from det_airflow.errors import DetError

    db = get_database()
    try:
        before, after = db.migrate()
    except SQLAlchemyError as exc:
        raise DetError(
            f"cannot migrate the det tables in {db.engine.url!r}: {exc.__class__.__name__}: {exc.orig if hasattr(exc, 'orig') else exc}"
        ) from None
    lines = [migration_summary(before, after)]
    lines.append(ensure_service_connection(db, conn_id, master_url or airflow_bridge.master_url()))
    if master_url is None and not settings.load().master_url:
        lines.append(
            "  (the address comes from Airflow's [api] settings: where workers reach the API server by "
            "another name, set [det] master_url and run `det admin migrate` again)"
        )
    lines.extend(restrict_dag_edits(db))
    lines.append(rewrite_summary(*mask_experiment_files(db)))
    from sqlalchemy.engine import make_url

    from det_airflow.master.search import ensure_optuna_schema, optuna_storage_url

    ensure_optuna_schema(db.engine)
    optuna_url = make_url(optuna_storage_url(db.url)).render_as_string(hide_password=True)
    lines.append(f"optuna studies of experiments with searcher.sampler: {optuna_url}")
    return lines


def restrict_dag_edits(db: Database) -> list[str]:
    """Under FAB: each experiment owner's role (their DAGs name it), and no global DAG edit for the
    User role, so that only owners and admins change an experiment through Airflow's own API."""
    from sqlalchemy import distinct, select

    from det_airflow.dagfactory import uses_fab
    from det_airflow.master import schema

    if not uses_fab():
        return []
    with db.read() as conn:
        owners = [o for o in conn.execute(select(distinct(schema.experiments.c.owner))).scalars() if o]
    for owner in owners:
        airflow_bridge.ensure_owner_role(owner)
    return [*airflow_bridge.restrict_plain_users(), f"FAB owner roles: {len(owners)} in place"]


def migration_summary(before: int | None, after: int) -> str:
    if before is None:
        return f"det tables: created at version {after}"
    if before == after:
        return f"det tables: already at version {after}"
    return f"det tables: upgraded from version {before} to {after}"


def ensure_service_connection(db: Database, conn_id: str, master_url: str) -> str:
    """Keep a working service token, or issue a new one into the Airflow connection `conn_id`."""
    from sqlalchemy import select

    from det_airflow.airflow_compat import Connection, create_session

    with create_session() as session:
        existing = session.scalars(select(Connection).where(Connection.conn_id == conn_id)).one_or_none()
        with db.read() as conn:
            stored = get_setting(conn, SERVICE_TOKEN_SETTING)
        if existing is not None and existing.password and stored == hash_token(existing.password):
            if existing.host != master_url:
                existing.host = master_url
                return f"connection '{conn_id}' now points at {master_url}"
            return f"connection '{conn_id}' is up to date ({master_url})"
        token = new_token()
        if existing is None:
            existing = Connection(conn_id=conn_id, conn_type="http", description="det-airflow master")
            session.add(existing)
        existing.host = master_url
        existing.password = token
        with db.begin() as conn:
            set_setting(conn, SERVICE_TOKEN_SETTING, hash_token(token))
    return f"connection '{conn_id}' created with a new service token ({master_url})"


def mask_experiment_files(db: Database) -> tuple[int, int]:
    """Rewrite each stored experiment's file in the DAGs folder (parsed or retired) as this version
    writes it, where it differs; answers (files rewritten, files found).

    Versions before masking wrote configs there in plain text, readable by every Airflow component;
    versions before the submission line left the experiment's DAG without its owner and run date.
    """
    from sqlalchemy import select

    from det_airflow.dagfactory import FINISHED_SUBDIR, experiment_file, read_submission
    from det_airflow.master import schema
    from det_airflow.master.experiment_files import write_experiment_file

    folder = airflow_bridge.dags_folder()
    rewritten = found = 0
    with db.read() as conn:
        rows = conn.execute(
            select(
                schema.experiments.c.id,
                schema.experiments.c.config,
                schema.experiments.c.owner,
                schema.experiments.c.start_time,
            )
        ).all()
    for row in rows:
        parsed = experiment_file(folder, row.id)
        for path in (parsed, parsed.parent / FINISHED_SUBDIR / parsed.name):
            try:
                before = path.read_text()
            except FileNotFoundError:
                continue
            found += 1
            kept = read_submission(before)  # the slots its DAG maps stay as they were counted
            slots = kept.trial_slots if kept else None
            write_experiment_file(row.id, row.config, path, submission=(row.owner, row.start_time, slots))
            rewritten += path.read_text() != before
    return rewritten, found


def rewrite_summary(rewritten: int, found: int) -> str:
    if not found:
        return "experiment files: none in the DAGs folder"
    return f"experiment files: rewrote {rewritten} of {found} with secrets masked"
