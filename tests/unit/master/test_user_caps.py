"""Per-user caps, answered 429 with the cap and its airflow.cfg setting before any work is done:
unmanaged experiments still running, preemption long polls held open, creates in flight."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from det_airflow.master import caps
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_unmanaged import CONFIG


@pytest.fixture(autouse=True)
def _storage(people: People, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(people.storage))


def _unmanaged(people: People, user: str = "alice") -> Any:
    return people.call(user, "POST", "/experiments/unmanaged", json={"config": CONFIG})


def test_unmanaged_experiments_still_running_are_capped_per_user(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__MAX_UNMANAGED_EXPERIMENTS_PER_USER", "2")
    first, second = _unmanaged(people).json(), _unmanaged(people).json()
    refused = _unmanaged(people)
    assert refused.status_code == 429
    assert "Retry-After" not in refused.headers, "a running experiment does not end by itself soon"
    assert refused.json()["detail"] == (
        "user 'alice' already has 2 unmanaged experiments running: the cap is 2 per user "
        "(airflow.cfg [det] max_unmanaged_experiments_per_user); wait for one to finish"
    )
    assert _unmanaged(people, "bob").status_code == 200, "another user's runs do not count"
    exit_path = f"/runtime/trials/{first['trial']['id']}/unmanaged/exit"
    ended = people.call(
        None, "POST", exit_path, headers={"Authorization": f"Bearer {first['token']}"}, json={}
    )
    assert ended.status_code == 200
    assert _unmanaged(people).status_code == 200, "an ended run frees its place"
    assert second["trial"]["id"] != first["trial"]["id"]


def test_preemption_long_polls_are_capped_per_owner_across_trials(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__MAX_LONG_POLLS_PER_USER", "1")
    runs = [_unmanaged(people).json() for _ in range(2)]
    answers: list[Any] = []

    def poll(run: dict[str, Any], seconds: float) -> Any:
        return people.call(
            None,
            "GET",
            f"/runtime/trials/{run['trial']['id']}/preemption?timeout_seconds={seconds}",
            headers={"Authorization": f"Bearer {run['token']}"},
        )

    holder = threading.Thread(target=lambda: answers.append(poll(runs[0], 3)))
    holder.start()
    try:
        while caps.long_polls.held("alice") == 0 and holder.is_alive():
            time.sleep(0.01)
        refused = poll(runs[1], 0)
    finally:
        holder.join()
    assert refused.status_code == 429
    assert refused.json()["detail"] == (
        "user 'alice' already has 1 preemption long polls open: the cap is 1 per user "
        "(airflow.cfg [det] max_long_polls_per_user); wait for one to finish"
    )
    assert answers[0].json() == {"preempt": False}
    assert poll(runs[1], 0).json() == {"preempt": False}, "a finished poll frees its place"


def test_creates_in_flight_are_capped_per_user(creator: Creator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__MAX_CREATES_PER_USER", "1")
    with caps.creates.hold("alice"):  # stands for alice's create still being checked
        refused = creator.create("alice")
        assert creator.create("bob").status_code == 200, "another user's creates do not count"
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "1", "a create in flight ends by itself: clients wait and resend"
    assert refused.json()["detail"] == (
        "user 'alice' already has 1 experiment creates in flight: the cap is 1 per user "
        "(airflow.cfg [det] max_creates_per_user); wait for one to finish"
    )
    assert creator.count() == 1
    assert creator.create("alice").status_code == 200
