"""The slot protocol over HTTP: what a trial slot is told, as the JSON the master sends (only the
fields of its status) and as det's client reads it (a SlotStatus and typed fields).

The master is the real app on SQLite over HTTP, reached with the service token as det's tasks do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy import update

from det_airflow.api._http import API_PREFIX
from det_airflow.api.internal import AsyncInternalClient, InternalClient
from det_airflow.api.models import SlotStatus, TaskRef
from det_airflow.master import schema
from tests.unit.master.creating import Creator, creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.master.test_queue import TASK, experiment, set_pool_slots, trial_ids
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master  # noqa: F401


def _ask(url: str, experiment_id: int, *, dry_run: bool = False) -> dict[str, Any]:
    """The master's answer as it travels, for slot 0."""
    query = "?dry_run=true" if dry_run else ""
    response = httpx.post(
        f"{url}{API_PREFIX}/internal/experiments/{experiment_id}/slots/0/acquire{query}",
        json=TASK,
        headers={"Authorization": f"Bearer {SERVICE_TOKEN}"},
    )
    response.raise_for_status()
    return dict(response.json())


def _pause(app: People, experiment_id: int) -> None:
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id).values(state="PAUSED")
        )


def test_a_waiting_slot_is_told_only_to_wait(master: tuple[People, str]) -> None:  # noqa: F811
    app, url = master
    set_pool_slots(2)
    e = experiment(app)
    _pause(app, e)

    assert _ask(url, e) == {"status": "wait"}
    assert asyncio.run(AsyncInternalClient(url, SERVICE_TOKEN).slot_status(e, 0)) is SlotStatus.WAIT


def test_a_slot_given_a_trial_gets_the_trial_its_token_and_spec(master: tuple[People, str]) -> None:  # noqa: F811
    app, url = master
    set_pool_slots(2)
    e = experiment(app)
    (t,) = trial_ids(app, e)

    assert _ask(url, e, dry_run=True) == {"status": "run"}
    answer = InternalClient(url, SERVICE_TOKEN).acquire(e, 0, TaskRef.model_validate(TASK))

    assert answer.status is SlotStatus.RUN
    assert answer.trial is not None and answer.trial.id == t
    assert answer.spec is not None and (answer.spec.trial_id, answer.spec.experiment_id) == (t, e)
    assert answer.token and answer.message is None and answer.ran is None


def test_a_run_answer_carries_no_field_of_another_status(master: tuple[People, str]) -> None:  # noqa: F811
    app, url = master
    set_pool_slots(2)
    e = experiment(app)

    assert set(_ask(url, e)) == {"status", "trial", "token", "spec"}
