"""What training code sends: step counts and checkpoint UUIDs are validated (never a 500), and a
retried metrics batch or checkpoint registration is stored once."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from det_airflow.api.models import MAX_STEPS
from det_airflow.master import schema
from det_airflow.master.auth import hash_token
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

TOKEN = "trial-token"
CKPT = "5b0f9c1e-2a4d-4c8e-9f3a-7d6e5c4b3a21"


class Trial:
    def __init__(self, people: People, trial_id: int) -> None:
        self.people, self.id = people, trial_id

    def post(self, what: str, body: dict[str, Any]) -> Any:
        return self.people.call(
            None,
            "POST",
            f"/runtime/trials/{self.id}/{what}",
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )

    def metrics(self) -> list[tuple[str, int, int]]:
        table = schema.metrics
        with self.people.db.read() as conn:
            rows = conn.execute(
                select(table.c.group, table.c.steps_completed, table.c.trial_run_id)
                .where(table.c.trial_id == self.id)
                .order_by(table.c.id)
            ).all()
        return [tuple(r) for r in rows]

    def checkpoints(self) -> list[tuple[str, int]]:
        table = schema.checkpoints
        with self.people.db.read() as conn:
            return [tuple(r) for r in conn.execute(select(table.c.uuid, table.c.steps_completed)).all()]

    def new_run(self) -> None:
        with self.people.db.begin() as conn:
            conn.execute(schema.trials.update().where(schema.trials.c.id == self.id).values(run_id=2))


def _add_trial(people: People, experiment_id: int, request_id: int, token: str | None) -> int:
    with people.db.begin() as conn:
        result = conn.execute(
            schema.trials.insert().values(
                experiment_id=experiment_id,
                request_id=request_id,
                state="RUNNING",
                hparams={},
                trial_seed=1,
                summary={},
                run_id=1,
                token_hash=hash_token(token) if token else None,
            )
        )
        return int(result.inserted_primary_key[0])


@pytest.fixture
def trial(creator: Creator) -> Trial:
    # Created paused, so its search has made no trial: the tests add their own.
    experiment_id = creator.create(paused=True).json()["experiment"]["id"]
    return Trial(creator.people, _add_trial(creator.people, experiment_id, 1, TOKEN))


def _report(steps: Any, group: str = "training") -> dict[str, Any]:
    return {"reports": [{"group": group, "steps_completed": steps, "metrics": {"loss": 0.5}}]}


@pytest.mark.parametrize("steps", [2**70, MAX_STEPS + 1, -1, True, 1.5, "10"])
def test_a_step_count_out_of_range_or_not_an_integer_is_a_422(trial: Trial, steps: Any) -> None:
    answer = trial.post("metrics", _report(steps))
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "reports", 0, "steps_completed"]
    checkpoint = trial.post("checkpoints", {"uuid": "c1", "steps_completed": steps})
    assert checkpoint.status_code == 422
    assert checkpoint.json()["detail"][0]["loc"] == ["body", "steps_completed"]
    assert trial.metrics() == [] and trial.checkpoints() == []


def test_the_largest_step_count_is_stored(trial: Trial) -> None:
    assert trial.post("metrics", _report(MAX_STEPS)).status_code == 200
    assert trial.metrics() == [("training", MAX_STEPS, 1)]


@pytest.mark.parametrize(
    "uuid",
    [
        # Names a trial could pick to have the master's GC remove something else (issue 20).
        "rootowned",
        ".airflow",
        "etc",
        ".",
        "..",
        "a/b",
        "../up",
        "",
        "white space",
        "x" * 65,
        # UUIDs, but not as the Core API writes them: one folder could go by several names.
        "9F0C2F1E-6F57-4BB4-9D3A-0D6C5B1F7A10",
        "{9f0c2f1e-6f57-4bb4-9d3a-0d6c5b1f7a10}",
        "9f0c2f1e6f574bb49d3a0d6c5b1f7a10",
    ],
)
def test_a_checkpoint_uuid_that_is_not_a_canonical_uuid_is_refused_naming_the_field(
    trial: Trial, uuid: str
) -> None:
    answer = trial.post("checkpoints", {"uuid": uuid, "steps_completed": 10})
    assert answer.status_code in (400, 422)
    if answer.status_code == 400:
        assert answer.json()["detail"].startswith("uuid: expected a lowercase UUID such as ")
        assert repr(uuid) in answer.json()["detail"]
    else:  # longer than any UUID: refused by the body's bounds
        assert answer.json()["detail"][0]["loc"] == ["body", "uuid"]
    assert trial.checkpoints() == []


@pytest.mark.parametrize(
    "uuid", ["9f0c2f1e-6f57-4bb4-9d3a-0d6c5b1f7a10", "00000000-0000-0000-0000-000000000000"]
)
def test_canonical_uuids_are_accepted_and_stored_where_the_experiments_storage_puts_them(
    people: People, uuid: str
) -> None:
    # shared_fs storage at the checkpoint root: the trial names the uuid, never the path.
    trial = Trial(people, _add_trial(people, people.add_experiment(owner="alice"), 1, TOKEN))
    answer = trial.post("checkpoints", {"uuid": uuid, "steps_completed": 10, "metadata": {"path": "/etc"}})
    assert answer.status_code == 200
    assert trial.checkpoints() == [(uuid, 10)]
    with people.db.read() as conn:
        path = conn.execute(select(schema.checkpoints.c.storage)).scalar_one()["path"]
    assert path == str(people.storage / uuid)


def test_a_retried_checkpoint_registration_answers_the_stored_checkpoint(trial: Trial) -> None:
    body = {"uuid": CKPT, "steps_completed": 10, "resources": {"state.pt": 7}}
    first, again = trial.post("checkpoints", body), trial.post("checkpoints", body)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert trial.checkpoints() == [(CKPT, 10)]


def test_a_uuid_registered_for_other_steps_or_another_trial_is_a_409(trial: Trial, creator: Creator) -> None:
    assert trial.post("checkpoints", {"uuid": CKPT, "steps_completed": 10}).status_code == 200
    other_steps = trial.post("checkpoints", {"uuid": CKPT, "steps_completed": 20})
    assert other_steps.status_code == 409
    assert other_steps.json()["detail"] == (
        f"checkpoint {CKPT} is already registered (trial {trial.id}, 10 steps); a new checkpoint needs a new uuid"
    )
    experiment_id = creator.people.trial(trial.id).experiment_id
    with creator.people.db.begin() as conn:
        conn.execute(schema.trials.update().where(schema.trials.c.id == trial.id).values(token_hash=None))
    other = Trial(creator.people, _add_trial(creator.people, experiment_id, 2, TOKEN))
    assert other.post("checkpoints", {"uuid": CKPT, "steps_completed": 10}).status_code == 409
    assert trial.checkpoints() == [(CKPT, 10)]


def test_a_retried_metrics_batch_is_stored_once(trial: Trial) -> None:
    batch = {
        "reports": [
            {"group": "training", "steps_completed": 100, "metrics": {"loss": 0.5}},
            {"group": "validation", "steps_completed": 100, "metrics": {"loss": 0.4}},
        ]
    }
    assert trial.post("metrics", batch).status_code == 200
    assert trial.post("metrics", batch).status_code == 200
    assert trial.post("metrics", _report(200)).status_code == 200
    assert trial.metrics() == [("training", 100, 1), ("validation", 100, 1), ("training", 200, 1)]


def test_a_new_run_reports_the_same_steps_afresh(trial: Trial) -> None:
    assert trial.post("metrics", _report(100)).status_code == 200
    trial.new_run()
    assert trial.post("metrics", _report(100)).status_code == 200
    assert trial.metrics() == [("training", 100, 1), ("training", 100, 2)]
