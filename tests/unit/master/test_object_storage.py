"""The master and checkpoints in an S3 bucket (moto's standalone server): it streams a checkpoint's
registered files to its readers, deletes objects on `det checkpoint delete` and garbage collection,
and reads the bucket's credentials from the YAML or from Airflow's connection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.core._storage import CheckpointStorage
from det_airflow.master import checkpoint_gc, removals, schema
from det_airflow.master.lifecycle import now
from tests.s3_server import s3_server
from tests.unit.master.people_app import NOW, People

BUCKET = "ckpt"
WEIGHTS = bytes(range(256)) * 64


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with s3_server(BUCKET) as url:
        yield url


def s3_section(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "s3", "bucket": BUCKET, "prefix": "team", "endpoint_url": url, **extra}


def with_keys(url: str) -> dict[str, Any]:
    return s3_section(url, access_key="k", secret_key="s")


def s3_experiment(people: People, storage: dict[str, Any], owner: str = "alice") -> tuple[int, int]:
    experiment_id = people.add_experiment(owner=owner)
    config = {**people.experiment(experiment_id).config, "checkpoint_storage": storage}
    with people.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id).values(config=config)
        )
    return experiment_id, people.add_trial(experiment_id, state="COMPLETED")


def stored_checkpoint(people: People, url: str, trial_id: int, uuid: str, steps: int = 10) -> None:
    """A checkpoint written to the bucket as a trial writes it, and registered."""
    storage = CheckpointStorage.from_config(with_keys(url))
    with storage.writing(uuid) as folder:
        (folder / "nested").mkdir()
        (folder / "nested" / "weights.bin").write_bytes(WEIGHTS)
        (folder / "metadata.json").write_text(json.dumps({"steps_completed": steps}))
    trial = people.trial(trial_id)
    with people.db.begin() as conn:
        conn.execute(
            schema.checkpoints.insert().values(
                uuid=uuid,
                trial_id=trial_id,
                experiment_id=trial.experiment_id,
                steps_completed=steps,
                state="COMPLETED",
                metadata={"steps_completed": steps},
                resources=storage.files(uuid),
                size=sum(storage.files(uuid).values()),
                storage=storage.describe(uuid),
                report_time=NOW,
            )
        )


def in_bucket(url: str, uuid: str) -> bool:
    return CheckpointStorage.from_config(with_keys(url)).exists(uuid)


def queued(people: People) -> list[Any]:
    """The file removals still waiting."""
    with people.db.read() as conn:
        return removals.pending(conn)


def test_a_reader_downloads_registered_files_through_the_master(people: People, s3_url: str) -> None:
    _, trial_id = s3_experiment(people, with_keys(s3_url))
    stored_checkpoint(people, s3_url, trial_id, "c1")

    answer = people.call("viewer", "GET", "/checkpoints/c1/files/nested/weights.bin")
    assert answer.status_code == 200
    assert answer.content == WEIGHTS
    assert answer.headers["content-length"] == str(len(WEIGHTS))

    missing = people.call("viewer", "GET", "/checkpoints/c1/files/other.bin")
    assert missing.status_code == 404 and "has no file 'other.bin'" in missing.json()["detail"]
    outside = people.call("viewer", "GET", "/checkpoints/c1/files/../c2/secret")
    assert outside.status_code == 404
    assert people.call("dave", "GET", "/checkpoints/c1/files/nested/weights.bin").status_code == 403


def test_the_credentials_may_come_from_the_airflow_connection(
    people: People, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = {"conn_type": "aws", "login": "k", "password": "s", "extra": {"endpoint_url": s3_url}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    _, trial_id = s3_experiment(people, {"type": "s3", "bucket": BUCKET, "prefix": "team"})
    stored_checkpoint(people, s3_url, trial_id, "c2")

    answer = people.call("alice", "GET", "/checkpoints/c2/files/metadata.json")

    assert answer.status_code == 200 and json.loads(answer.content) == {"steps_completed": 10}


def test_folder_storage_is_not_served_through_the_master(people: People) -> None:
    experiment_id = people.add_experiment(owner="alice")
    people.add_checkpoint(people.add_trial(experiment_id, state="COMPLETED"), "f1")

    answer = people.call("alice", "GET", "/checkpoints/f1/files/state.pt")

    assert answer.status_code == 400 and "not through the master" in answer.json()["detail"]


def test_deleting_a_checkpoint_deletes_its_objects(people: People, s3_url: str) -> None:
    _, trial_id = s3_experiment(people, with_keys(s3_url))
    stored_checkpoint(people, s3_url, trial_id, "c3")
    assert in_bucket(s3_url, "c3")

    assert people.call("bob", "DELETE", "/checkpoints/c3").status_code == 403
    assert in_bucket(s3_url, "c3")
    assert people.call("alice", "DELETE", "/checkpoints/c3").status_code == 200
    assert people.checkpoint("c3").state == "DELETED"
    assert in_bucket(s3_url, "c3"), "the objects go with the queued removal, not in the request"

    assert people.remove_files() == 1
    assert not in_bucket(s3_url, "c3")


def test_a_bucket_out_of_reach_keeps_the_removal_until_it_has_failed_max_attempts_times(
    people: People, s3_url: str
) -> None:
    _, trial_id = s3_experiment(people, with_keys(s3_url))
    stored_checkpoint(people, s3_url, trial_id, "c4")
    with people.db.begin() as conn:  # the experiment's storage now names a bucket that is gone
        row = people.experiment(people.trial(trial_id).experiment_id)
        config = {**row.config, "checkpoint_storage": with_keys(s3_url) | {"bucket": "gone"}}
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == row.id).values(config=config)
        )

    assert people.call("alice", "DELETE", "/checkpoints/c4").status_code == 200
    assert people.checkpoint("c4").state == "DELETED"

    for attempt in range(1, removals.MAX_ATTEMPTS + 1):
        assert people.remove_files() == 1
        (left,) = queued(people)
        assert left.attempts == attempt
        assert "'gone'" in left.problem
        assert people.remove_files() == 0, "tried again only after RETRY_SECONDS"
        with people.db.begin() as conn:
            retry_at = now() - timedelta(seconds=removals.RETRY_SECONDS + 1)
            conn.execute(update(schema.removals).values(claimed_at=retry_at))
    # Tried MAX_ATTEMPTS times: it stays, with its problem, for an admin, and is not tried again.
    assert people.remove_files() == 0
    assert [row.attempts for row in queued(people)] == [removals.MAX_ATTEMPTS]
    assert in_bucket(s3_url, "c4")


def test_garbage_collection_deletes_the_objects_the_policy_does_not_keep(people: People, s3_url: str) -> None:
    policy = {"save_trial_latest": 1, "save_trial_best": 0, "save_experiment_best": 0}
    experiment_id, trial_id = s3_experiment(people, with_keys(s3_url) | policy)
    for steps, uuid in enumerate(["g1", "g2", "g3"], start=1):
        stored_checkpoint(people, s3_url, trial_id, uuid, steps=steps)

    assert checkpoint_gc.collect(people.db, experiment_id) == []
    assert [people.checkpoint(u).state for u in ("g1", "g2", "g3")] == ["DELETED", "DELETED", "COMPLETED"]
    assert [in_bucket(s3_url, uuid) for uuid in ("g1", "g2", "g3")] == [True, True, True]

    assert people.remove_files() == 1
    assert [in_bucket(s3_url, uuid) for uuid in ("g1", "g2", "g3")] == [False, False, True]
    assert queued(people) == []
