"""Creating an experiment: a retried request_id answers the first experiment, concurrent creates
all succeed, and the file the DAG factory reads holds no secrets."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from det_airflow import settings
from det_airflow.dagfactory import experiment_file, load_experiment
from det_airflow.master import airflow_bridge
from tests.unit.master.creating import SECRETS, Creator
from tests.unit.master.people_app import People


def test_a_retry_with_the_same_request_id_answers_the_first_experiment(creator: Creator) -> None:
    first = creator.create(request_id="cli-retry-1")
    again = creator.create(request_id="cli-retry-1")
    assert first.status_code == again.status_code == 200
    assert again.json()["experiment"]["id"] == first.json()["experiment"]["id"]
    assert creator.count() == 1


def test_creates_without_a_request_id_are_separate_experiments(creator: Creator) -> None:
    ids = {creator.create().json()["experiment"]["id"] for _ in range(2)}
    assert len(ids) == 2


def test_another_users_request_id_is_refused_and_nothing_is_stored(creator: Creator) -> None:
    creator.create("alice", request_id="shared-key")
    answer = creator.create("bob", request_id="shared-key")
    assert answer.status_code == 409
    assert (
        answer.json()["detail"]
        == "request_id 'shared-key' was already used by another user; choose a new one"
    )
    assert creator.count() == 1


@pytest.mark.parametrize("request_id", ["", "x" * 65, "has space", "semi;colon", "ü"])
def test_a_malformed_request_id_is_refused(creator: Creator, request_id: str) -> None:
    answer = creator.create(request_id=request_id)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "request_id"]
    assert creator.count() == 0


def test_a_64_character_request_id_is_accepted(creator: Creator) -> None:
    assert creator.create(request_id="A-_9" * 16).status_code == 200


def test_ten_concurrent_creates_all_succeed_with_distinct_ids(
    creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__MAX_CREATES_PER_USER", "10")  # the per-user cap: test_user_caps.py
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: creator.create(), range(10)))
    assert [a.status_code for a in answers] == [200] * 10
    assert len({a.json()["experiment"]["id"] for a in answers}) == 10
    assert creator.count() == 10
    assert creator.parse_requests() == 1  # one pending parse of the factory, asked for ten times


def test_ten_concurrent_creates_with_one_request_id_make_one_experiment(
    creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__MAX_CREATES_PER_USER", "10")  # the per-user cap: test_user_caps.py
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: creator.create(request_id="burst"), range(10)))
    assert [a.status_code for a in answers] == [200] * 10
    assert len({a.json()["experiment"]["id"] for a in answers}) == 1
    assert creator.count() == 1


def test_the_dags_folder_file_masks_secrets_and_still_compiles(creator: Creator, people: People) -> None:
    experiment_id = creator.create().json()["experiment"]["id"]
    path = experiment_file(airflow_bridge.dags_folder(), experiment_id)
    text = path.read_text()
    assert [s for s in SECRETS if s in text] == []
    assert "WANDB_API_KEY=********" in text

    cfg = load_experiment(path, settings.airflow_defaults())
    assert cfg is not None
    assert (cfg.resources.priority, cfg.max_restarts, cfg.airflow.pool) == (7, 3, "default_pool")
    assert cfg.searcher.name == "single"
    # Trials get the full config from the master, secrets included.
    stored = people.experiment(experiment_id).config
    assert stored["checkpoint_storage"]["secret_key"] == "storage-secret"
    assert "WANDB_API_KEY=wandb-secret" in str(stored["environment"]["environment_variables"])
