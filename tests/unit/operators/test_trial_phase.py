"""A run's start as its slot's runner reports it: PULLING the image, STARTING, RUNNING.

The master is the real app on SQLite over HTTP, reached with the service token as det's tasks do.
"""

from __future__ import annotations

import logging

import httpx
import pytest
from sqlalchemy import update

from det_airflow.api._http import API_PREFIX
from det_airflow.api.internal import InternalClient
from det_airflow.errors import APIError
from det_airflow.master import lifecycle, schema, trials
from det_airflow.operators.trial import TrialOperator
from tests.unit.master.creating import Creator, creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.master.test_queue import TASK, experiment, set_pool_slots, trial_ids
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master  # noqa: F401


def started_trial(app: People) -> int:
    set_pool_slots(2)
    e = experiment(app)
    (t,) = trial_ids(app, e)
    with app.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
        assert trials.acquire(conn, e, 0, TASK, dry_run=False)["status"] == "run"
    return t


def history(app: People, trial_id: int) -> list[tuple[str | None, str, str]]:
    with app.db.read() as conn:
        return [(c["from"], c["to"], c["reason"]) for c in lifecycle.history(conn, "trial", trial_id)]


def test_a_container_runs_start_is_shown_pulling_then_starting_then_running(
    master: tuple[People, str],  # noqa: F811
) -> None:
    app, url = master
    t = started_trial(app)
    client = InternalClient(url, SERVICE_TOKEN)

    assert client.trial_phase(t, 1, "PULLING", "pulling image det-trial:1").trial.state == "PULLING"
    assert client.trial_phase(t, 1, "STARTING", "pulled image det-trial:1").trial.state == "STARTING"
    assert client.trial_phase(t, 1, "RUNNING", "container 0123456789ab started").trial.state == "RUNNING"
    # Said again (a retried request), or late: nothing moves.
    assert client.trial_phase(t, 1, "RUNNING", "container 0123456789ab started").trial.state == "RUNNING"
    assert client.trial_phase(t, 1, "PULLING", "pulling image det-trial:1").trial.state == "RUNNING"

    assert history(app, t)[1:] == [
        ("STARTING", "PULLING", "pulling image det-trial:1"),
        ("PULLING", "STARTING", "pulled image det-trial:1"),
        ("STARTING", "RUNNING", "container 0123456789ab started"),
    ]


def test_a_report_for_another_run_or_an_ended_trial_changes_nothing(
    master: tuple[People, str],  # noqa: F811
) -> None:
    app, url = master
    t = started_trial(app)
    client = InternalClient(url, SERVICE_TOKEN)

    assert client.trial_phase(t, 0, "RUNNING", "an earlier run's runner").trial.state == "STARTING"
    assert client.trial_phase(t, 2, "RUNNING", "a run that never was").trial.state == "STARTING"
    with app.db.begin() as conn:
        trials.kill_trial(conn, t)
    assert client.trial_phase(t, 1, "RUNNING", "too late").trial.state == "STOPPING_KILLED"
    assert [to for _, to, _ in history(app, t)] == ["STARTING", "STOPPING_KILLED"]


def test_a_bad_phase_is_refused_naming_the_field_and_nothing_moves(
    master: tuple[People, str],  # noqa: F811
) -> None:
    app, url = master
    t = started_trial(app)
    client = InternalClient(url, SERVICE_TOKEN)

    for body, field in (
        ({"run_id": 1, "state": "COMPLETED", "reason": "r"}, "state"),
        ({"run_id": 1, "state": "RUNNING", "reason": ""}, "reason"),
        ({"run_id": 1, "state": "RUNNING", "reason": "x" * 501}, "reason"),
        ({"state": "RUNNING", "reason": "r"}, "run_id"),
    ):
        with pytest.raises(APIError, match=field) as refused:
            client.session.post(f"/internal/trials/{t}/phase", body)
        assert refused.value.status_code == 422
    with pytest.raises(APIError, match="trial 999 not found") as missing:
        client.trial_phase(999, 1, "RUNNING", "r")
    assert missing.value.status_code == 404
    assert app.trial(t).state == "STARTING"


def test_only_dets_own_tasks_may_report_a_phase(master: tuple[People, str]) -> None:  # noqa: F811
    app, url = master
    t = started_trial(app)
    body = {"run_id": 1, "state": "RUNNING", "reason": "r"}
    route = f"{url}{API_PREFIX}/internal/trials/{t}/phase"

    assert httpx.post(route, json=body).status_code == 401
    wrong = {"Authorization": "Bearer not-the-service-token"}
    assert httpx.post(route, json=body, headers=wrong).status_code in (401, 403)
    assert app.trial(t).state == "STARTING"


def test_the_runner_goes_on_when_the_master_cannot_be_told(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = TrialOperator(task_id="trial", experiment_id=1, slot=0)
    monkeypatch.setattr(TrialOperator, "log", logging.getLogger("det-test-runner"))
    client = InternalClient("http://127.0.0.1:9", SERVICE_TOKEN)  # nothing listens there
    client.session.retry_seconds = 0.0  # its task would ride out an outage; here the answer is known

    with caplog.at_level(logging.WARNING):
        op.report_phase(client, 5, 1, "RUNNING", "its process starts")

    assert "Could not tell the master trial 5 is RUNNING" in caplog.text
