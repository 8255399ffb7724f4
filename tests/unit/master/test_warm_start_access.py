"""A warm start reads another experiment's checkpoint: its submitter must be allowed to read it."""

from __future__ import annotations

import yaml

from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People


def warm_start(**searcher: object) -> str:
    return yaml.safe_dump(
        {
            "name": "warm",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}, **searcher},
        }
    )


def test_a_warm_start_from_an_experiment_the_submitter_may_not_read_is_refused(
    people: People, creator: Creator
) -> None:
    source = people.add_experiment(owner="alice")
    trial = people.add_trial(source, state="COMPLETED")
    uuid = "4b0e9d9c-3d8f-4f56-a0a6-7c1f4f0e2d11"
    people.add_checkpoint(trial, uuid)
    before = creator.count()
    for searcher in ({"source_trial_id": trial}, {"source_checkpoint_uuid": uuid}):
        answer = creator.create(user="dave", config=warm_start(**searcher))
        assert answer.status_code == 403, answer.text
        assert answer.json()["detail"] == (
            f"user 'dave' may not warm-start from experiment {source}: needs read access to DAG 'det_{source}'"
        )
    assert creator.count() == before

    answer = creator.create(user="bob", config=warm_start(source_trial_id=trial))
    assert answer.status_code == 200, answer.text
    assert creator.count() == before + 1
