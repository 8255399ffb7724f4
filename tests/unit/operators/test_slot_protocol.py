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


def test_a_node_task_is_told_where_its_part_of_a_multi_node_run_waits(master: tuple[People, str]) -> None:  # noqa: F811
    from det_airflow.operators.triggers import TrialNodeTrigger
    from tests.unit.master.test_hosts import report

    app, url = master
    set_pool_slots(8)
    report(app, "a", 2)
    report(app, "b", 2)
    e = experiment(app, slots_per_trial=4)
    client = InternalClient(url, SERVICE_TOKEN)
    node_task = {**TASK, "task_id": "trial_node", "host": "a"}
    trigger = TrialNodeTrigger(url, SERVICE_TOKEN, e, slot=0, rank=1, host="a", min_wait=0)
    async_client = AsyncInternalClient(url, SERVICE_TOKEN)
    # The node task looks again after its wait, whatever it finds (it moves, runs, or ends).
    assert asyncio.run(trigger._check(async_client)) == {"status": "wait", "host": None}

    chief = client.acquire(e, 0, TaskRef.model_validate({**TASK, "host": "a", "port": 29600}))
    assert chief.spec is not None and chief.spec.gang is not None
    assert (chief.spec.gang.addrs, chief.spec.gang.rank, chief.spec.gang.port) == (["a", "b"], 0, 29600)
    # Node 1 waits on host b: the trigger of a task on host a fires, so that its task moves there.
    assert asyncio.run(async_client.node_status(e, 0, 1, "a")).host == "b"
    assert asyncio.run(trigger._check(async_client)) == {"status": "wait", "host": "b"}
    part = client.acquire_node(e, 0, 1, TaskRef.model_validate({**node_task, "host": "b"}))
    assert part.status is SlotStatus.RUN and part.spec is not None and part.spec.gang is not None
    assert (part.spec.gang.rank, part.spec.gang.slots, part.token != chief.token) == (1, 2, True)

    assert chief.trial is not None
    client.exit_node(chief.trial.id, 1, part.spec.run_id, 3)
    assert client.trial_status(chief.trial.id).gang_failed == "node 1 on host b exited 3"


def test_a_node_stops_when_its_gang_failed_or_its_run_is_over(master: tuple[People, str]) -> None:  # noqa: F811
    from det_airflow.api.models import TrialStatus
    from det_airflow.operators.triggers import stop_reason

    app, url = master
    set_pool_slots(2)
    e = experiment(app)
    answer = InternalClient(url, SERVICE_TOKEN).acquire(e, 0, TaskRef.model_validate(TASK))
    assert answer.trial is not None and answer.spec is not None
    status = InternalClient(url, SERVICE_TOKEN).trial_status(answer.trial.id)
    run = answer.spec.run_id
    assert stop_reason(status, None, 0.0, 60, run_id=run) == (None, None), "its run goes on"
    assert stop_reason(status, None, 0.0, 60) == (None, None)
    failed = TrialStatus.model_validate({**status.model_dump(), "gang_failed": "node 1 on host b exited 3"})
    assert stop_reason(failed, None, 0.0, 60)[0] == "stops with its gang: node 1 on host b exited 3"
    assert (
        stop_reason(status, None, 0.0, 60, run_id=run - 1)[0]
        == f"has no run {run - 1} going any more (STARTING)"
    )
