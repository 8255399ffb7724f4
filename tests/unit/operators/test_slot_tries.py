"""A trial slot's later try (an activation starts one) ends as the slot's earlier tries left it:
it returns the trials that ended in the slot, and is skipped only when the slot ran none. The master
is the real app on SQLite, reached over HTTP."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException
from sqlalchemy import update

from det_airflow.master import schema
from det_airflow.operators.trial import TrialOperator
from tests.unit.master.creating import creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master  # noqa: F401


def run_slot(experiment_id: int, slot: int, try_number: int, tmp_path: Path) -> Any:
    op = TrialOperator(task_id="trial", experiment_id=experiment_id, slot=slot, work_dir=str(tmp_path))
    ti = SimpleNamespace(
        id=uuid.uuid4(), task_id="trial", dag_id=f"det_{experiment_id}", run_id="r",
        try_number=try_number, max_tries=0, map_index=slot,
    )  # fmt: skip
    return op.execute({"ti": ti})  # type: ignore[arg-type]


def test_a_later_try_of_a_slot_returns_the_trials_its_earlier_tries_ran(
    master: tuple[People, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, url = master
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT", json.dumps({"conn_type": "http", "host": url, "password": SERVICE_TOKEN})
    )
    e = app.add_experiment(owner="alice")
    ended = app.add_trial(e, state="COMPLETED")
    with app.db.begin() as conn:
        conn.execute(update(schema.trials).where(schema.trials.c.id == ended).values(slot=0))
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))

    assert run_slot(e, 0, 2, tmp_path) == {"trials": [ended]}
    with pytest.raises(AirflowSkipException, match="the search needs no trial in slot 1"):
        run_slot(e, 1, 1, tmp_path)
