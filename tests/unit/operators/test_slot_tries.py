"""A trial slot's later try (an activation starts one) ends as the slot's earlier tries left it:
it returns the trials that ended in the slot, and is skipped only when the slot ran none. The master
is the real app on SQLite, reached over HTTP."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
from airflow.sdk.exceptions import AirflowSkipException
from sqlalchemy import update

from det_airflow.master import schema
from det_airflow.operators.trial import SLOT_LABEL_KEY, SLOT_MAP_INDEX_TEMPLATE, TrialOperator, slot_label
from tests.unit.master.creating import creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master  # noqa: F401


def run_slot(
    experiment_id: int, slot: int, try_number: int, tmp_path: Path, context: dict[str, Any] | None = None
) -> Any:
    op = TrialOperator(task_id="trial", experiment_id=experiment_id, slot=slot, work_dir=str(tmp_path))
    ti = SimpleNamespace(
        id=uuid.uuid4(), task_id="trial", dag_id=f"det_{experiment_id}", run_id="r",
        try_number=try_number, max_tries=0, map_index=slot,
    )  # fmt: skip
    context = {} if context is None else context
    context.update(ti=ti, task=op)
    return op.execute(context)  # type: ignore[arg-type]


def search_done_with_one_trial_ended_in_slot_0(
    master: tuple[People, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, int]:
    """An experiment whose search is done and whose slot 0 ran one trial; the operator's default
    connection points at the master. Answers the experiment and the trial."""
    app, url = master
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT", json.dumps({"conn_type": "http", "host": url, "password": SERVICE_TOKEN})
    )
    e = app.add_experiment(owner="alice")
    ended = app.add_trial(e, state="COMPLETED")
    with app.db.begin() as conn:
        conn.execute(update(schema.trials).where(schema.trials.c.id == ended).values(slot=0))
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
    return e, ended


def test_a_later_try_of_a_slot_returns_the_trials_its_earlier_tries_ran(
    master: tuple[People, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    e, ended = search_done_with_one_trial_ended_in_slot_0(master, monkeypatch)

    assert run_slot(e, 0, 2, tmp_path) == {"trials": [ended]}
    with pytest.raises(AirflowSkipException, match="the search needs no trial in slot 1"):
        run_slot(e, 1, 1, tmp_path)


def test_airflow_names_a_slots_task_instance_by_the_trials_it_ran(
    master: tuple[People, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    e, ended = search_done_with_one_trial_ended_in_slot_0(master, monkeypatch)
    # Airflow renders the task's map_index_template with its context, its DAGs' undefined names strict.
    render = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(SLOT_MAP_INDEX_TEMPLATE).render
    context: dict[str, Any] = {}
    run_slot(e, 0, 2, tmp_path, context)
    assert context[SLOT_LABEL_KEY] == f"slot 0: trial {ended}"
    assert render(context) == f"slot 0: trial {ended}"
    # As the task starts, before the operator has said anything: the slot alone.
    assert render({"task": SimpleNamespace(slot=4)}) == "slot 4"


def test_a_slot_label_says_what_runs_and_keeps_the_ends_of_a_long_list() -> None:
    assert slot_label(2, []) == "slot 2"
    assert slot_label(2, [], running=9) == "slot 2: trial 9"
    assert slot_label(2, [3, 5], running=9) == "slot 2: trial 9 (ran 3, 5)"
    assert slot_label(2, [3, 5, 9]) == "slot 2: trials 3, 5, 9"
    many = list(range(1000, 1100))
    label = slot_label(0, many, running=2000)
    assert label == "slot 0: trial 2000 (ran 1000, 1001, ... 1099 (100))"
    assert len(label) <= 250
