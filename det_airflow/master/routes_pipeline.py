"""Routes for experiments that people's own DAGs run (``DetExperimentOperator``), with det's
service token.

Who may submit: whoever may write a DAG that uses a ``det`` connection. The token is det's own
credential, so Airflow's auth manager is not asked at submission (no check of the right to create
DAG runs, of the pool, or of a warm start's source): an Airflow deployment already trusts its DAG
authors with the connections it lets them use. The experiment is recorded as ``owner``'s, who then
may change it as with an experiment of their own, and every later request of people goes through
the auth manager as usual.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import Connection, Row, select

from det_airflow.api.pipeline import PIPELINE_PREFIX, ExperimentOutcome, SubmitExperiment
from det_airflow.lineage import checkpoint_uri
from det_airflow.master import experiments, schema, submission, trials
from det_airflow.master.auth import ServiceAuth
from det_airflow.master.db import get_database

router = APIRouter(prefix=PIPELINE_PREFIX, dependencies=[ServiceAuth])


@router.post("/experiments", response_model=ExperimentOutcome)
def submit_experiment(body: SubmitExperiment) -> dict:
    """Creates the experiment as `det experiment create` does (its own DAG, run at once), owned by
    ``owner``; a repeated ``request_id`` answers the experiment it already made."""
    db = get_database()
    row, created = submission.create_once(
        db,
        config_yaml=body.config,
        context=body.context,
        owner=body.owner,
        request_id=body.request_id,
        first_trials=trials.place_first_trials,
    )
    if created:
        trials.make_room_for_submitted(db, row.id, row.resource_pool)
    with db.read() as conn:
        return outcome(conn, experiments.get_experiment(conn, row.id))


@router.get("/experiments/{experiment_id}", response_model=ExperimentOutcome)
def experiment_outcome(experiment_id: int) -> dict:
    """The experiment's state and its best completed checkpoint by the searcher metric."""
    with get_database().read() as conn:
        return outcome(conn, experiments.get_experiment(conn, experiment_id))


def outcome(conn: Connection, row: Row) -> dict:
    searcher = experiments.experiment_config(row).searcher
    table = schema.checkpoints
    order = table.c.validation_metric
    best = conn.execute(
        select(table.c.uuid, table.c.validation_metric, table.c.storage)
        .where(
            table.c.experiment_id == row.id,
            table.c.state == "COMPLETED",
            table.c.validation_metric.is_not(None),
        )
        .order_by(order.asc() if searcher.smaller_is_better else order.desc())
        .limit(1)
    ).first()
    return {
        "experiment_id": row.id,
        "state": row.state,
        "owner": row.owner,
        "dag_id": row.dag_id,
        "error": row.error,
        "metric": searcher.metric,
        "smaller_is_better": searcher.smaller_is_better,
        "best_checkpoint_uuid": best.uuid if best is not None else None,
        "best_metric": best.validation_metric if best is not None else None,
        "best_checkpoint_uri": checkpoint_uri(best.storage or {}) if best is not None else None,
    }
