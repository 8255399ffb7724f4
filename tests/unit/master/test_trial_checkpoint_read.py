"""A trial's token reads the records of its owner's checkpoints, and of the one checkpoint its
experiment declared to warm-start from; another user's checkpoints are refused."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from det_airflow.master import schema
from det_airflow.master.auth import hash_token
from tests.unit.master.people_app import People


def _trial_with_token(people: People, owner: str, token: str, **searcher: Any) -> int:
    e = people.add_experiment(owner=owner)
    if searcher:
        config = people.experiment(e).config
        config = {**config, "searcher": {**config["searcher"], **searcher}}
        with people.db.begin() as conn:
            conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(config=config))
    t = people.add_trial(e, state="RUNNING")
    with people.db.begin() as conn:
        conn.execute(
            update(schema.trials).where(schema.trials.c.id == t).values(token_hash=hash_token(token))
        )
    return t


def _read(people: People, token: str, uuid: str) -> Any:
    return people.client.get(
        f"/api/v1/runtime/checkpoints/{uuid}", headers={"Authorization": f"Bearer {token}"}
    )


def test_a_trial_reads_checkpoints_of_its_owners_experiments(people: People) -> None:
    older = people.add_trial(people.add_experiment(owner="alice"), state="COMPLETED")
    people.add_checkpoint(older, "alice-ckpt")
    _trial_with_token(people, "alice", "alice-trial-token")
    answer = _read(people, "alice-trial-token", "alice-ckpt")
    assert answer.status_code == 200
    assert answer.json()["checkpoint"]["uuid"] == "alice-ckpt"


def test_a_trial_may_not_read_another_users_checkpoint(people: People) -> None:
    bobs = people.add_trial(people.add_experiment(owner="bob"), state="COMPLETED")
    people.add_checkpoint(bobs, "bob-ckpt")
    t = _trial_with_token(people, "alice", "alice-trial-token")
    answer = _read(people, "alice-trial-token", "bob-ckpt")
    assert answer.status_code == 403
    assert answer.json()["detail"] == (
        f"trial {t} may not read checkpoint bob-ckpt: it belongs to another user's experiment and is "
        "not the checkpoint this experiment warm-starts from"
    )
    assert "storage" not in answer.text


def test_a_trial_reads_the_checkpoint_its_experiment_warm_starts_from(people: People) -> None:
    bobs = people.add_trial(people.add_experiment(owner="bob"), state="COMPLETED")
    people.add_checkpoint(bobs, "bob-shared-ckpt")
    people.add_checkpoint(bobs, "bob-other-ckpt")
    _trial_with_token(people, "alice", "alice-trial-token", source_checkpoint_uuid="bob-shared-ckpt")
    assert _read(people, "alice-trial-token", "bob-shared-ckpt").status_code == 200
    assert _read(people, "alice-trial-token", "bob-other-ckpt").status_code == 403
