"""Read routes the web UI needs beyond the CLI's: Airflow ids → experiment, and learning curves."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from sqlalchemy import Connection, Row, select

from det_airflow.airflow_compat import requires_authenticated
from det_airflow.api.models import Curves, Resolved
from det_airflow.dagfactory import experiment_dag_id
from det_airflow.master import curves, experiments, schema
from det_airflow.master.auth import CrossSiteGuard
from det_airflow.master.authz import CallerDep, check_read
from det_airflow.master.db import get_database

router = APIRouter(dependencies=[Depends(requires_authenticated()), CrossSiteGuard])

_OWN_DAG_PREFIX = experiment_dag_id(0).removesuffix("0")


@router.get("/ui/resolve", response_model=Resolved)
def resolve(
    caller: CallerDep,
    dag_id: Annotated[str, Query(min_length=1, max_length=250)],
    run_id: Annotated[str | None, Query(max_length=250)] = None,
    map_index: Annotated[int | None, Query(ge=-1)] = None,
) -> dict:
    """The experiment of a DAG (run), and the trial of one of its mapped task instances."""
    with get_database().read() as conn:
        exp = _experiment_of(conn, dag_id, run_id)
        check_read(caller, exp, "open")
        trial_id = None
        if map_index is not None:
            trials = schema.trials
            trial_id = conn.execute(
                select(trials.c.id)
                .where(trials.c.experiment_id == exp.id, trials.c.slot == map_index)
                .order_by(trials.c.id.desc())
                .limit(1)
            ).scalar()
            if trial_id is None:
                raise experiments.NotFound(f"experiment {exp.id} has no trial at map index {map_index} (yet)")
    return {"experiment_id": exp.id, "trial_id": trial_id}


def _experiment_of(conn: Connection, dag_id: str, run_id: str | None) -> Row:
    table = schema.experiments
    query = select(table).where(table.c.dag_id == dag_id)
    if run_id is not None:
        row = conn.execute(query.where(table.c.dag_run_id == run_id)).first()
    else:  # a dropped YAML's DAG runs once per experiment: the newest one
        row = conn.execute(query.order_by(table.c.id.desc()).limit(1)).first()
    suffix = dag_id.removeprefix(_OWN_DAG_PREFIX)
    if row is None and suffix != dag_id and suffix.isdigit():
        # An experiment's own DAG, before its run registered.
        row = conn.execute(select(table).where(table.c.id == int(suffix), table.c.dag_id == dag_id)).first()
    if row is None:
        run = f" run '{run_id}'" if run_id is not None else ""
        raise experiments.NotFound(f"no experiment runs as DAG '{dag_id}'{run}")
    return row


# Encoded by curves.curves_json (cached per trial), so declared rather than validated on the way out.
@router.get(
    "/experiments/{experiment_id}/curves",
    response_class=Response,
    responses={200: {"model": Curves, "description": "every trial's series of one metric"}},
)
def experiment_curves(
    experiment_id: int,
    caller: CallerDep,
    group: curves.Group = "validation",
    metric: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    x: curves.XAxis = "batches",
    points: Annotated[int, Query(ge=10, le=5000)] = 400,
    keep_best: Annotated[bool, Query(description="false: the best trials' series downsampled too")] = True,
) -> Response:
    """Every trial's series of one metric, downsampled except the best trials' (unless keep_best is
    false: comparing many experiments draws every series at the same resolution)."""
    query = curves.CurveQuery(experiment_id, group, metric, x, points, keep_best)
    with get_database().read() as conn:
        exp = experiments.get_experiment(conn, experiment_id)
        check_read(caller, exp, "read the curves of")
        body = curves.curves_json(conn, exp, query)
    return Response(body, media_type="application/json")
