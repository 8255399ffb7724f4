"""Unmanaged experiments in the master: created by a person, reported to with the trial token."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

CONFIG = {"name": "notebook-run", "description": "tried in a notebook", "labels": ["adhoc"]}
# Unmanaged runs register checkpoints as trials do: a canonical UUID (the Core API makes one).
CKPT = "5b0f9c1e-2a4d-4c8e-9f3a-7d6e5c4b3a21"


@pytest.fixture(autouse=True)
def _default_storage(people: People, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(people.storage))


def _create(people: People, user: str = "alice", **body: Any) -> dict[str, Any]:
    body.setdefault("config", CONFIG)
    body.setdefault("hparams", {"lr": 0.1})
    response = people.call(user, "POST", "/experiments/unmanaged", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _runtime(people: People, run: dict[str, Any], method: str, path: str, **kwargs: Any) -> Any:
    trial_id = run["trial"]["id"]
    headers = {"Authorization": f"Bearer {run['token']}"}
    return people.call(None, method, f"/runtime/trials/{trial_id}{path}", headers=headers, **kwargs)


def test_a_created_unmanaged_experiment_runs_one_trial_owned_by_its_creator(people: People) -> None:
    run = _create(people, command="python3 train.py")
    experiment, trial = run["experiment"], run["trial"]
    assert (experiment["owner"], experiment["state"], experiment["dag_id"]) == ("alice", "ACTIVE", None)
    assert (experiment["name"], experiment["labels"], experiment["num_trials"]) == (
        "notebook-run",
        ["adhoc"],
        1,
    )
    assert (trial["state"], trial["hparams"]) == ("RUNNING", {"lr": 0.1})
    storage = run["config"]["checkpoint_storage"]
    assert (storage["type"], storage["host_path"]) == ("shared_fs", str(people.storage))
    logs = people.call("alice", "GET", f"/trials/{trial['id']}/logs").json()["logs"]
    assert [line["message"] for line in logs] == ["unmanaged run started by alice: python3 train.py"]


def test_reports_reach_the_trial_and_a_clean_exit_completes_the_experiment(people: People) -> None:
    run = _create(people)
    reports = [
        {"group": "training", "steps_completed": 10, "metrics": {"loss": 0.5}},
        {"group": "validation", "steps_completed": 10, "metrics": {"loss": 0.4}},
    ]
    assert _runtime(people, run, "POST", "/metrics", json={"reports": reports}).status_code == 200
    assert _runtime(people, run, "POST", "/progress", json={"progress": 0.5}).status_code == 200
    (people.storage / CKPT).mkdir()
    checkpoint = {"uuid": CKPT, "steps_completed": 10, "resources": {"w.pt": 3}}
    stored = _runtime(people, run, "POST", "/checkpoints", json=checkpoint).json()["checkpoint"]
    assert stored["storage"]["path"] == str(people.storage / CKPT)
    assert _runtime(people, run, "GET", "/preemption").json() == {"preempt": False}

    answer = _runtime(people, run, "POST", "/unmanaged/exit", json={"error": None}).json()
    assert answer["experiment"]["state"] == "COMPLETED"
    experiment_id, trial_id = run["experiment"]["id"], run["trial"]["id"]
    described = people.call("alice", "GET", f"/experiments/{experiment_id}").json()
    trial = described["trials"][0]
    assert (trial["state"], trial["latest_checkpoint"], trial["total_batches"]) == ("COMPLETED", CKPT, 10)
    assert trial["best_validation"] == {"metric": 0.4, "steps_completed": 10}
    metrics = people.call("alice", "GET", f"/trials/{trial_id}/metrics?group=validation").json()["metrics"]
    assert [m["metrics"] for m in metrics] == [{"loss": 0.4}]
    # The trial token ends with the run.
    refused = _runtime(people, run, "POST", "/metrics", json={"reports": reports})
    assert refused.status_code == 403


def test_an_exit_with_an_error_marks_the_experiment_error(people: People) -> None:
    run = _create(people)
    error = "ValueError: loss became NaN"
    answer = _runtime(people, run, "POST", "/unmanaged/exit", json={"error": error}).json()
    assert (answer["experiment"]["state"], answer["experiment"]["error"]) == ("ERROR", error)
    trials = people.call("alice", "GET", f"/experiments/{run['experiment']['id']}/trials").json()["trials"]
    assert [t["state"] for t in trials] == ["ERROR"]


def test_an_unmanaged_experiment_cannot_be_paused_but_can_be_killed_and_deleted(people: People) -> None:
    run = _create(people)
    experiment_id = run["experiment"]["id"]
    paused = people.call("alice", "POST", f"/experiments/{experiment_id}/pause")
    assert paused.status_code == 409
    assert "unmanaged" in paused.json()["detail"] and "cannot be paused" in paused.json()["detail"]
    assert people.experiment(experiment_id).state == "ACTIVE"

    killed = people.call("alice", "POST", f"/experiments/{experiment_id}/kill").json()["experiment"]
    assert killed["state"] == "CANCELED"
    # The program, still running, hears it and may send its last reports.
    assert _runtime(people, run, "GET", "/preemption").json() == {"preempt": True}
    answer = _runtime(people, run, "POST", "/unmanaged/exit", json={"error": None}).json()
    assert answer["experiment"]["state"] == "CANCELED"

    deleted = people.call("alice", "DELETE", f"/experiments/{experiment_id}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["not_removed"] == []
    assert people.call("alice", "GET", f"/experiments/{experiment_id}").status_code == 404


def test_killing_its_trial_asks_the_program_to_stop(people: People) -> None:
    run = _create(people)
    assert people.call("alice", "POST", f"/trials/{run['trial']['id']}/kill").status_code == 200
    assert _runtime(people, run, "GET", "/preemption").json() == {"preempt": True}
    answer = _runtime(people, run, "POST", "/unmanaged/exit", json={"error": None}).json()
    assert answer["experiment"]["state"] == "COMPLETED"
    trial = people.trial(run["trial"]["id"])
    assert trial.state == "CANCELED"


def test_only_its_owner_and_admins_see_and_change_it(people: People) -> None:
    run = _create(people)
    experiment_id = run["experiment"]["id"]
    listed = {
        user: [e["id"] for e in people.call(user, "GET", "/experiments").json()["experiments"]]
        for user in ("alice", "bob", "admin")
    }
    assert listed == {"alice": [experiment_id], "bob": [], "admin": [experiment_id]}
    refused = people.call("bob", "GET", f"/experiments/{experiment_id}")
    assert refused.status_code == 403
    assert "unmanaged experiment of 'alice'" in refused.json()["detail"]
    assert people.call("bob", "POST", f"/experiments/{experiment_id}/kill").status_code == 403
    assert people.call("admin", "POST", f"/experiments/{experiment_id}/kill").status_code == 200


def test_creating_needs_the_right_to_create_dag_runs(people: People) -> None:
    response = people.call("viewer", "POST", "/experiments/unmanaged", json={"config": CONFIG})
    assert response.status_code == 403
    assert "may not create experiments" in response.json()["detail"]
    assert people.call("admin", "GET", "/experiments").json()["experiments"] == []


def test_an_invalid_config_is_refused_naming_the_field(people: People) -> None:
    config = {**CONFIG, "searcher": {"name": "single", "metric": "loss", "max_length": "ten"}}
    response = people.call("alice", "POST", "/experiments/unmanaged", json={"config": config})
    assert response.status_code == 400
    assert "searcher.max_length" in response.json()["detail"]
    assert people.call("admin", "GET", "/experiments").json()["experiments"] == []


def test_a_managed_trial_cannot_report_an_unmanaged_exit(people: People) -> None:
    experiment_id = people.add_experiment(owner="alice")
    trial_id = people.add_trial(experiment_id, state="RUNNING")
    from det_airflow.master import auth, schema

    token = auth.new_token()
    with people.db.begin() as conn:
        conn.execute(
            schema.trials.update()
            .where(schema.trials.c.id == trial_id)
            .values(token_hash=auth.hash_token(token))
        )
    response = people.call(
        None,
        "POST",
        f"/runtime/trials/{trial_id}/unmanaged/exit",
        json={"error": None},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 409
    assert "managed experiment" in response.json()["detail"]
    assert people.trial(trial_id).state == "RUNNING"
    # Nor write its trial's log: a managed trial's output comes from its task only.
    forged = people.call(
        None,
        "POST",
        f"/runtime/trials/{trial_id}/unmanaged/logs",
        json={"logs": [{"message": "accuracy 1.0"}]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert forged.status_code == 409
    assert "its task ships its output" in forged.json()["detail"]
    with people.db.read() as conn:
        messages = conn.execute(select(schema.trial_logs.c.message)).scalars().all()
    assert "accuracy 1.0" not in messages


def test_an_unmanaged_run_takes_no_slot_of_an_airflow_pool(people: People, creator: Creator) -> None:
    run = _create(people)
    jobs = people.call("alice", "GET", "/jobs").json()["jobs"]
    assert [(j["id"], j["resource_pool"]) for j in jobs] == [(run["experiment"]["id"], "unmanaged")]
    assert people.call("alice", "GET", "/jobs?resource_pool=default_pool").json()["jobs"] == []
