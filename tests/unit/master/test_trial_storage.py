"""A trial's files in object storage go through the master, which alone holds the store's
credentials: each store (moto's S3 server, fake-gcs-server, Azurite) behind Airflow's connection of
its type, and two users' trials, alice's and bob's, with their trial tokens.

A trial writes only its own checkpoints (claimed with their first file, never once registered) and
its own TensorBoard files; it reads only what its owner may read; nothing of another user's is
listed, read, overwritten or deleted."""

from __future__ import annotations

import json
import uuid as uuids
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.master import schema, trial_storage
from tests.unit.master.people_app import People
from tests.unit.master.served import give_token
from tests.unit.master.stores import STORE_KINDS, Store, running_store

BUCKET = "trial-files"
ALICE_WEIGHTS = b"alice's weights " * 4096
BOB_WEIGHTS = b"bob's weights"


@pytest.fixture(scope="module", params=STORE_KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    with running_store(request.param, BUCKET) as running:
        yield running


@dataclass
class Trial:
    people: People
    id: int
    experiment_id: int
    token: str

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return self.people.client.request(method, f"/api/v1/runtime{path}", headers=headers, **kwargs)

    def storage(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.call(method, f"/trials/{self.id}/storage{path}", **kwargs)

    def put(self, path: str, body: bytes) -> Any:
        return self.storage("PUT", path, content=body, headers={"Content-Type": "application/octet-stream"})

    def register(self, uuid: str, resources: dict[str, int]) -> Any:
        body = {"uuid": uuid, "steps_completed": 10, "metadata": {}, "resources": resources}
        return self.call("POST", f"/trials/{self.id}/checkpoints", json=body)


@pytest.fixture
def world(people: People, store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    variable, connection = store.connection
    monkeypatch.setenv(variable, json.dumps(connection))
    trial_storage.stores.clear()  # each module's server is another store behind the same config
    yield World(people, store, f"team-{uuids.uuid4().hex[:8]}")
    trial_storage.stores.clear()


@dataclass
class World:
    """The app, the store, and the prefix this test's experiments keep their files under."""

    people: People
    store: Store
    prefix: str

    def objects(self) -> dict[str, bytes]:
        """The store's objects under this test's prefix."""
        return {k: v for k, v in self.store.objects().items() if k.startswith(f"{self.prefix}/")}

    def trial(self, owner: str, *, section: dict[str, Any] | None = None, **searcher: Any) -> Trial:
        people = self.people
        experiment_id = people.add_experiment(owner=owner)
        config = dict(people.experiment(experiment_id).config)
        config["checkpoint_storage"] = section or {**self.store.section, "prefix": self.prefix}
        config["searcher"] = {**config["searcher"], **searcher}
        with people.db.begin() as conn:
            conn.execute(
                update(schema.experiments)
                .where(schema.experiments.c.id == experiment_id)
                .values(config=config)
            )
        trial_id = people.add_trial(experiment_id, state="RUNNING")
        token = f"token-of-trial-{trial_id}"
        give_token(people, trial_id, token)
        return Trial(people, trial_id, experiment_id, token)

    def saved(self, trial: Trial, files: dict[str, bytes]) -> str:
        """A checkpoint the trial wrote through the master and registered; its uuid."""
        uuid = str(uuids.uuid4())
        for name, body in files.items():
            assert trial.put(f"/checkpoints/{uuid}/files/{name}", body).status_code == 200
        assert trial.register(uuid, {name: len(body) for name, body in files.items()}).status_code == 200
        return uuid


def test_a_trial_writes_reads_back_and_registers_its_own_checkpoint(world: World) -> None:
    bob = world.trial("bob")
    uuid = str(uuids.uuid4())

    assert bob.storage("GET", f"/checkpoints/{uuid}").json() == {"files": {}}
    assert bob.put(f"/checkpoints/{uuid}/files/nested/model.pt", BOB_WEIGHTS).status_code == 200
    assert bob.storage("GET", f"/checkpoints/{uuid}").json() == {
        "files": {"nested/model.pt": len(BOB_WEIGHTS)}
    }
    assert bob.storage("GET", f"/checkpoints/{uuid}/files/nested/model.pt").content == BOB_WEIGHTS
    assert world.objects() == {f"{world.prefix}/{uuid}/nested/model.pt": BOB_WEIGHTS}

    assert bob.register(uuid, {"nested/model.pt": len(BOB_WEIGHTS)}).status_code == 200
    again = bob.put(f"/checkpoints/{uuid}/files/nested/model.pt", b"changed")
    assert again.status_code == 409
    assert again.json()["detail"] == (
        f"checkpoint {uuid} is registered: its files never change; a new checkpoint needs a new uuid"
    )
    assert world.objects() == {f"{world.prefix}/{uuid}/nested/model.pt": BOB_WEIGHTS}


def test_another_users_trial_neither_reads_nor_overwrites_nor_deletes_a_checkpoint(world: World) -> None:
    alice, bob = world.trial("alice"), world.trial("bob")
    uuid = world.saved(alice, {"model.pt": ALICE_WEIGHTS})
    before = world.objects()

    listed = bob.storage("GET", f"/checkpoints/{uuid}")
    assert listed.status_code == 403
    assert listed.json()["detail"] == (
        f"trial {bob.id} may not read checkpoint {uuid}: it belongs to another user's experiment and "
        "is not the checkpoint this experiment warm-starts from"
    )
    assert bob.storage("GET", f"/checkpoints/{uuid}/files/model.pt").status_code == 403
    assert bob.put(f"/checkpoints/{uuid}/files/model.pt", BOB_WEIGHTS).status_code == 409
    assert bob.put(f"/checkpoints/{uuid}/files/extra.py", BOB_WEIGHTS).status_code == 409
    deleted = bob.storage("DELETE", f"/checkpoints/{uuid}")
    assert deleted.status_code == 403 and f"it belongs to trial {alice.id}" in deleted.json()["detail"]

    assert world.objects() == before
    download = world.people.call("alice", "GET", f"/checkpoints/{uuid}/files/model.pt")
    assert download.status_code == 200 and download.content == ALICE_WEIGHTS
    assert alice.storage("GET", f"/checkpoints/{uuid}/files/model.pt").content == ALICE_WEIGHTS


def test_a_checkpoint_being_written_is_its_trials_alone(world: World) -> None:
    alice, bob, alices_other = world.trial("alice"), world.trial("bob"), world.trial("alice")
    uuid = str(uuids.uuid4())
    assert alice.put(f"/checkpoints/{uuid}/files/part-0", ALICE_WEIGHTS).status_code == 200

    for trial in (bob, alices_other):
        refused = trial.put(f"/checkpoints/{uuid}/files/part-0", BOB_WEIGHTS)
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            f"trial {trial.id} may not write checkpoint {uuid}: trial {alice.id} is writing it; "
            "a new checkpoint needs a new uuid"
        )
        assert trial.storage("GET", f"/checkpoints/{uuid}").status_code == 403
        assert trial.storage("DELETE", f"/checkpoints/{uuid}").status_code == 403
    assert world.objects() == {f"{world.prefix}/{uuid}/part-0": ALICE_WEIGHTS}

    # A failed upload: its trial removes what it sent.
    assert alice.storage("DELETE", f"/checkpoints/{uuid}").status_code == 200
    assert world.objects() == {}


def test_a_trial_reads_its_owners_checkpoints_and_the_one_it_warm_starts_from(world: World) -> None:
    alice = world.trial("alice")
    shared = world.saved(alice, {"model.pt": ALICE_WEIGHTS})
    private = world.saved(alice, {"model.pt": ALICE_WEIGHTS})
    alices_next = world.trial("alice")
    bobs_warm_start = world.trial("bob", source_checkpoint_uuid=shared)

    assert alices_next.storage("GET", f"/checkpoints/{private}/files/model.pt").content == ALICE_WEIGHTS
    assert bobs_warm_start.storage("GET", f"/checkpoints/{shared}").json() == {
        "files": {"model.pt": len(ALICE_WEIGHTS)}
    }
    assert bobs_warm_start.storage("GET", f"/checkpoints/{shared}/files/model.pt").content == ALICE_WEIGHTS
    assert bobs_warm_start.storage("GET", f"/checkpoints/{private}").status_code == 403
    assert bobs_warm_start.put(f"/checkpoints/{shared}/files/model.pt", BOB_WEIGHTS).status_code == 409


def test_only_registered_files_are_read_and_at_their_registered_size(world: World) -> None:
    alice = world.trial("alice")
    uuid = str(uuids.uuid4())
    for name in ("model.pt", "unregistered.bin"):
        assert alice.put(f"/checkpoints/{uuid}/files/{name}", ALICE_WEIGHTS).status_code == 200
    assert alice.register(uuid, {"model.pt": len(ALICE_WEIGHTS)}).status_code == 200

    assert alice.storage("GET", f"/checkpoints/{uuid}").json() == {"files": {"model.pt": len(ALICE_WEIGHTS)}}
    missing = alice.storage("GET", f"/checkpoints/{uuid}/files/unregistered.bin")
    assert missing.status_code == 404 and "no file 'unregistered.bin'" in missing.json()["detail"]
    outside = alice.storage("GET", f"/checkpoints/{uuid}/files/../{uuid}/model.pt")
    assert outside.status_code in (400, 404)


def test_a_trial_writes_its_own_tensorboard_files_and_reads_no_one_elses(world: World) -> None:
    alice, bob = world.trial("alice"), world.trial("bob")
    assert alice.put("/tensorboard/files/events.out.tfevents.1", b"alice's events").status_code == 200
    assert bob.put("/tensorboard/files/events.out.tfevents.1", b"bob's events").status_code == 200

    listed = alice.storage("GET", f"/tensorboard/{alice.id}").json()["files"]
    assert list(listed) == ["events.out.tfevents.1"] and listed["events.out.tfevents.1"]["size"] == 14
    refused = bob.storage("GET", f"/tensorboard/{alice.id}")
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        f"trial {bob.id} may not read the TensorBoard files of trial {alice.id}: only that trial and "
        "the TensorBoards that show it may"
    )
    assert bob.storage("GET", f"/tensorboard/{alice.id}/files/events.out.tfevents.1").status_code == 403
    alices_folder = f"{world.prefix}/tensorboard/experiment/{alice.experiment_id}/trial/{alice.id}/"
    assert world.objects()[alices_folder + "events.out.tfevents.1"] == b"alice's events"


def test_a_tensorboard_reads_the_files_of_the_trials_it_shows(world: World) -> None:
    alice, bob = world.trial("alice"), world.trial("bob")
    assert alice.put("/tensorboard/files/events.out.tfevents.1", b"alice's events").status_code == 200
    alices_board, bobs_board = world.trial("alice"), world.trial("bob")
    with world.people.db.begin() as conn:
        for board, shown in ((alices_board, alice), (bobs_board, bob)):
            conn.execute(
                schema.tasks.insert().values(
                    id=board.experiment_id,
                    type="tensorboard",
                    config={},
                    args={"sources": [{"experiment_id": shown.experiment_id, "trial_id": shown.id}]},
                )
            )

    path = f"/tensorboard/{alice.id}/files/events.out.tfevents.1"
    assert alices_board.storage("GET", path).content == b"alice's events"
    assert bobs_board.storage("GET", path).status_code == 403
    assert bobs_board.storage("GET", f"/tensorboard/{alice.id}").status_code == 403


def test_a_prefix_inside_another_checkpoint_or_tensorboard_folder_is_refused(world: World) -> None:
    alice = world.trial("alice")
    uuid = world.saved(alice, {"model.pt": ALICE_WEIGHTS})
    for prefix in (f"{world.prefix}/{uuid}", f"{world.prefix}/tensorboard/experiment/{alice.experiment_id}"):
        bob = world.trial("bob", section={**world.store.section, "prefix": prefix})
        refused = bob.put(f"/checkpoints/{uuids.uuid4()}/files/model.pt", BOB_WEIGHTS)
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"].startswith(
            f"checkpoint_storage.prefix: {prefix!r} names a checkpoint's"
        )
        assert bob.put("/tensorboard/files/events", BOB_WEIGHTS).status_code == 400
    assert list(world.objects()) == [f"{world.prefix}/{uuid}/model.pt"]


def test_a_file_needs_its_size_and_a_uuid(world: World) -> None:
    bob = world.trial("bob")
    not_uuid = bob.put("/checkpoints/etc/files/passwd", BOB_WEIGHTS)
    assert not_uuid.status_code == 400 and "uuid: expected a lowercase UUID" in not_uuid.json()["detail"]

    def chunks() -> Iterator[bytes]:
        yield BOB_WEIGHTS  # no Content-Length: sent chunked

    unsized = bob.storage("PUT", f"/checkpoints/{uuids.uuid4()}/files/model.pt", content=chunks())
    assert unsized.status_code == 411 and "Content-Length" in unsized.json()["detail"]
    assert world.objects() == {}


def test_another_trials_token_is_refused(world: World) -> None:
    alice, bob = world.trial("alice"), world.trial("bob")
    forged = bob.call("GET", f"/trials/{alice.id}/storage/tensorboard/{alice.id}")
    assert forged.status_code == 403 and forged.json()["detail"] == f"token not valid for trial {alice.id}"
