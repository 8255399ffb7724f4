"""A trial learns that it should stop from a long poll it keeps open at the master, not by asking:
the preemption route answers as soon as the trial should stop, and the Core API's watcher thread
holds one such poll. The master is the real app on SQLite, reached over HTTP with the trial token."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.api.runtime import RuntimeClient
from det_airflow.core import DistributedContext, PreemptContext, _remote
from det_airflow.core._remote import RemoteBackend
from det_airflow.errors import APIError
from det_airflow.master import schema
from tests.unit.master.creating import Creator, creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_context import TOKEN, MasterOverHttp, add_trial


class Trial:
    def __init__(self, app: People, url: str, trial_id: int) -> None:
        self.app, self.url, self.id = app, url, trial_id

    def client(self) -> RuntimeClient:
        return RuntimeClient(self.url, TOKEN, self.id)

    def set(self, table: Any, row_id: int, **values: Any) -> None:
        with self.app.db.begin() as conn:
            conn.execute(update(table).where(table.c.id == row_id).values(**values))

    def pause(self) -> None:
        self.set(schema.trials, self.id, pause_requested=True)


@pytest.fixture
def trial(creator: Creator) -> Iterator[Trial]:  # noqa: F811
    # Created paused, so its search has made no trial: the test adds its own, running.
    experiment_id = creator.create(paused=True).json()["experiment"]["id"]
    trial_id = add_trial(creator.people, experiment_id)
    with MasterOverHttp(creator.people) as server:
        running = Trial(creator.people, server.url, trial_id)
        running.set(schema.experiments, experiment_id, state="ACTIVE")
        yield running


def eventually(check: Callable[[], bool], what: str, tries: int = 600) -> None:
    stop = threading.Event()
    for _ in range(tries):
        if check():
            return
        stop.wait(0.05)
    raise AssertionError(f"never: {what}")


def test_the_long_poll_answers_no_at_its_end_and_yes_once_the_trial_should_stop(trial: Trial) -> None:
    with trial.client() as client:
        assert client.should_preempt() is False
        assert client.wait_for_preemption(0.3) is False
        paused_later = threading.Timer(0.3, trial.pause)
        paused_later.start()
        try:
            assert client.wait_for_preemption(30) is True
        finally:
            paused_later.cancel()


@pytest.mark.parametrize("timeout", ["-1", "61", "soon"])
def test_a_long_poll_past_a_minute_or_not_a_number_is_a_422(trial: Trial, timeout: str) -> None:
    answer = trial.app.call(
        None,
        "GET",
        f"/runtime/trials/{trial.id}/preemption?timeout_seconds={timeout}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["query", "timeout_seconds"]


def test_a_trial_learns_of_a_pause_from_its_watcher_without_asking(trial: Trial) -> None:
    backend = RemoteBackend(trial.client(), watch=True)
    preempt = PreemptContext(DistributedContext(), backend, min_interval=0.0)
    try:
        assert preempt.should_preempt() is False  # asked once, then the watcher follows the master

        def asked(*args: Any) -> bool:
            raise AssertionError("the Core API asked the master instead of reading its watcher")

        backend.client.should_preempt = asked  # type: ignore[method-assign]
        assert preempt.should_preempt() is False
        trial.pause()
        eventually(preempt.should_preempt, "the watcher's yes")
    finally:
        backend.close()


def test_a_watcher_whose_token_is_refused_stops_and_the_core_api_asks_again(
    trial: Trial, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_remote, "WATCH_POLL_SECONDS", 0.2)
    monkeypatch.setattr(_remote, "WATCH_MIN_INTERVAL_SECONDS", 0.05)
    backend = RemoteBackend(trial.client(), watch=True)
    preempt = PreemptContext(DistributedContext(), backend, min_interval=0.0)
    try:
        assert preempt.should_preempt() is False
        trial.set(schema.trials, trial.id, token_hash=None)  # its run ended

        def refused() -> bool:
            try:
                preempt.should_preempt()
            except APIError as exc:
                assert (exc.status_code, str(exc)) == (
                    403,
                    f"permission denied: token not valid for trial {trial.id}",
                )
                return True
            return False

        eventually(refused, "the run's end reaching the Core API")
    finally:
        backend.close()


def test_a_trial_holds_at_most_two_long_polls_open(trial: Trial) -> None:
    from det_airflow.master import routes_runtime

    answers: list[bool] = []
    clients = [trial.client() for _ in range(2)]
    holders = [
        threading.Thread(target=lambda c=c: answers.append(c.wait_for_preemption(30))) for c in clients
    ]
    for holder in holders:
        holder.start()
    try:
        eventually(lambda: routes_runtime._open_long_polls[trial.id] == 2, "two long polls open")
        with trial.client() as third, pytest.raises(APIError) as refused:
            third.wait_for_preemption(30)
        assert refused.value.status_code == 429
        assert str(refused.value) == (
            f"trial {trial.id} already holds 2 preemption long polls open; wait for one to answer"
        )
    finally:
        trial.pause()
        for holder in holders:
            holder.join(timeout=30)
        for client in clients:
            client.close()
    assert answers == [True, True]
    assert trial.id not in routes_runtime._open_long_polls
