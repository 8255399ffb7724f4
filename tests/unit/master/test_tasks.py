"""Tasks beside experiments (notebooks, TensorBoards, commands, shells) through the master's routes:
who may start, see, open and kill them, what the queue makes of them, and what their programs may say."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.master import queue_policy, tasks, trials
from det_airflow.master.authz import Caller
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

TASK = {"dag_id": "det_x", "run_id": "r", "task_id": "trial", "map_index": 0, "try_number": 1}


def start(people: People, user: str, **body: Any) -> Any:
    return people.call(user, "POST", "/tasks", json=body)


def started(people: People, user: str, **body: Any) -> dict[str, Any]:
    answer = start(people, user, **body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["task"])


def run_token(people: People, task_id: int) -> str:
    """The task's trial admitted and started as its slot task would: the token its program gets."""
    with people.db.begin() as conn:
        answer = trials.acquire(conn, task_id, 0, {**TASK, "dag_id": f"det_exp_{task_id}"}, dry_run=False)
    assert answer["status"] == "run", answer
    return str(answer["token"])


def test_a_notebook_is_a_task_not_an_experiment(people: People, creator: Creator) -> None:
    notebook = started(people, "alice", type="notebook", config="resources: {slots: 2}\nidle_timeout: 30m\n")
    assert notebook["type"] == "notebook"
    assert notebook["owner"] == "alice"
    assert notebook["state"] == "QUEUED"
    assert notebook["slots"] == 2
    assert notebook["idle_timeout"] == 1800.0
    assert notebook["url"] == f"/det/proxy/{notebook['id']}/lab"
    assert notebook["dag_id"] == f"det_exp_{notebook['id']}"

    listed = people.call("alice", "GET", "/tasks").json()["tasks"]
    assert [t["id"] for t in listed] == [notebook["id"]]
    assert people.call("bob", "GET", "/tasks").json()["tasks"] == []
    assert [t["id"] for t in people.call("bob", "GET", "/tasks?all=true").json()["tasks"]] == [notebook["id"]]
    assert people.call("alice", "GET", "/tasks?type=shell").json()["tasks"] == []
    assert people.call("alice", "GET", "/experiments").json()["experiments"] == []

    jobs = people.call("alice", "GET", "/jobs").json()["jobs"]
    assert [(j["id"], j["type"]) for j in jobs] == [(notebook["id"], "TYPE_NOTEBOOK")]


def test_a_tasks_program_learns_what_to_run_and_its_runner_says_where_it_listens(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    shell = started(people, "alice", type="shell", command=["bash", "-l"], config="idle_timeout: 90\n")
    token = run_token(people, shell["id"])
    trial_id = people.call("alice", "GET", f"/tasks/{shell['id']}").json()["task"]["trial_id"]
    bearer = {"Authorization": f"Bearer {token}"}
    answer = people.client.get(f"/api/v1/runtime/trials/{trial_id}/task", headers=bearer)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "id": shell["id"],
        "type": "shell",
        "args": {"command": ["bash", "-l"]},
        "proxy_prefix": f"/det/proxy/{shell['id']}/",
        "bind_address": "127.0.0.1",
        "idle_timeout": 90.0,
        "ready_to": "runner",
    }
    secret = "s" * 32
    ready = people.client.post(
        f"/api/v1/internal/trials/{trial_id}/task/ready",
        headers=service_headers,
        json={"port": 4321, "secret": secret, "address": "127.0.0.1"},
    )
    assert ready.status_code == 200, ready.text
    assert people.call("alice", "GET", f"/tasks/{shell['id']}").json()["task"]["ready"] is True
    # Only det's service token says so for a runner: not a trial's token, not a person's login.
    for headers in (bearer, {"X-Test-User": "alice", "Authorization": "Bearer login-of-alice"}):
        refused = people.client.post(
            f"/api/v1/internal/trials/{trial_id}/task/ready",
            headers=headers,
            json={"port": 1, "secret": secret},
        )
        assert refused.status_code == 403, refused.text

    # The runner withdraws the port once the task's server no longer holds it: a withdrawal of
    # another port (an older report) leaves the report alone; neither a trial nor a person may.
    gone = f"/api/v1/internal/trials/{trial_id}/task/ready"
    assert people.client.delete(gone, params={"port": 4321}, headers=bearer).status_code == 403
    assert people.client.delete(gone, params={"port": 1234}, headers=service_headers).status_code == 200
    assert people.call("alice", "GET", f"/tasks/{shell['id']}").json()["task"]["ready"] is True
    assert people.client.delete(gone, params={"port": 4321}, headers=service_headers).status_code == 200
    assert people.call("alice", "GET", f"/tasks/{shell['id']}").json()["task"]["ready"] is False
    assert people.client.delete(gone, params={"port": 0}, headers=service_headers).status_code == 422


def test_a_local_tasks_own_word_on_its_port_is_refused(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    """The task's program (its owner's code) could name any port of its host: another user's server
    or one of the platform's. On a local or Docker runner only the runner, which checks that the port
    is held by the task's own process, may say where it listens."""
    notebook = started(people, "alice", type="notebook")
    token = run_token(people, notebook["id"])
    trial_id = people.call("alice", "GET", f"/tasks/{notebook['id']}").json()["task"]["trial_id"]
    for port in (8080, 5432, 6379):
        refused = people.client.post(
            f"/api/v1/runtime/trials/{trial_id}/task/ready",
            headers={"Authorization": f"Bearer {token}"},
            json={"port": port, "secret": "s" * 32},
        )
        assert refused.status_code == 403, refused.text
        assert "the task's own report is refused" in refused.json()["detail"]
    assert people.call("alice", "GET", f"/tasks/{notebook['id']}").json()["task"]["ready"] is False
    with people.db.read() as conn:
        assert tasks.get_task(conn, notebook["id"]).port is None
    # Another task's trial token says nothing for this one.
    other = started(people, "alice", type="notebook")
    other_token = run_token(people, other["id"])
    refused = people.client.post(
        f"/api/v1/runtime/trials/{trial_id}/task/ready",
        headers={"Authorization": f"Bearer {other_token}"},
        json={"port": 1, "secret": "s" * 32},
    )
    assert refused.status_code in (401, 403)


def test_a_tensorboard_runs_in_the_platforms_environment(people: People, creator: Creator) -> None:
    """Other people open a TensorBoard's pages: its owner chooses neither its program nor its
    environment (a PYTHONPATH with a sitecustomize ran the owner's script in every visitor's page)."""
    experiment = people.add_experiment(owner="bob")
    people.add_trial(experiment, state="COMPLETED")
    cases = [
        (
            "environment: {environment_variables: [PYTHONPATH=/tmp/mine]}\n",
            "environment.environment_variables",
        ),
        ("environment: {image: bob/tensorboard:latest}\n", "environment.image"),
        ("environment: {pod_spec: {spec: {}}}\n", "environment.pod_spec"),
        ("bind_mounts: [{host_path: /tmp, container_path: /mine}]\n", "bind_mounts"),
        ("work_dir: /tmp/mine\n", "work_dir"),
    ]
    for config, field in cases:
        refused = start(people, "bob", type="tensorboard", experiment_ids=[experiment], config=config)
        assert refused.status_code == 400, (config, refused.text)
        assert field in refused.json()["detail"], refused.text
        assert "platform's own program" in refused.json()["detail"]
    with_context = start(
        people, "bob", type="tensorboard", experiment_ids=[experiment], context="H4sIAAAAAAAA"
    )
    assert with_context.status_code == 400, with_context.text
    assert "context" in with_context.json()["detail"]
    assert people.call("bob", "GET", "/tasks").json()["tasks"] == []

    board = started(
        people, "bob", type="tensorboard", experiment_ids=[experiment], config="idle_timeout: 1h\n"
    )
    config = people.experiment(board["id"]).config
    # Isolated: no PYTHON* variable, user site or working folder on its import path.
    assert config["entrypoint"][:3] == ["python3", "-I", "-m"]
    environment = config.get("environment") or {}
    assert not any((environment.get("environment_variables") or {}).values()), environment
    assert not any((environment.get("image") or {}).values()), environment
    assert not config.get("bind_mounts")


def test_only_the_owner_or_an_admin_opens_a_notebook(people: People, creator: Creator) -> None:
    notebook = started(people, "alice", type="notebook")
    with people.db.read() as conn:
        task = tasks.get_task(conn, notebook["id"])
        experiment = people.experiment(notebook["id"])
        for user in ("bob", "viewer"):
            caller = Caller(people_user(user))
            with pytest.raises(tasks.PermissionDenied, match="only its owner or an admin"):
                tasks.check_open(conn, caller, task, experiment)
        tasks.check_open(conn, Caller(people_user("alice")), task, experiment)
        tasks.check_open(conn, Caller(people_user("admin")), task, experiment)


def people_user(name: str) -> Any:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from tests.unit.master.people_app import ROLES

    return SimpleAuthManagerUser(username=name, role=ROLES[name])


def test_a_tensorboard_needs_read_access_to_every_experiment_it_shows(
    people: People, creator: Creator
) -> None:
    mine = people.add_experiment(owner="alice")
    people.add_trial(mine, state="COMPLETED")
    other = people.add_experiment(owner="bob")
    people.add_trial(other, state="COMPLETED")
    # dave may start tasks but not read DAG det_1 (the people app's auth manager).
    assert mine == 1
    refused = start(people, "dave", type="tensorboard", experiment_ids=[other, mine])
    assert refused.status_code == 403
    assert f"experiment {mine}" in refused.json()["detail"]

    board = started(people, "alice", type="tensorboard", experiment_ids=[mine, other])
    assert board["slots"] == 0
    assert board["experiment_ids"] == [mine, other]
    assert len(board["trial_ids"]) == 2


def test_bad_task_requests_name_what_is_wrong(people: People, creator: Creator) -> None:
    cases = [
        ({"type": "command"}, "entrypoint"),
        ({"type": "notebook", "config": "resources: {slots_per_trial: 1}\n"}, "resources.slots_per_trial"),
        ({"type": "notebook", "config": "idle_timout: 5m\n"}, "did you mean 'idle_timeout'"),
        ({"type": "notebook", "config": "idle_timeout: soon\n"}, "idle_timeout"),
        ({"type": "tensorboard"}, "name at least one experiment"),
        ({"type": "tensorboard", "experiment_ids": [99]}, "experiment 99 not found"),
        ({"type": "command", "command": ["true"], "config": "idle_timeout: 1m\n"}, "idle_timeout"),
        ({"type": "notebook", "config": "resources: {resource_pool: nowhere}\n"}, "nowhere"),
    ]
    for body, expected in cases:
        answer = start(people, "alice", **body)
        assert answer.status_code in (400, 404), (body, answer.text)
        assert expected in answer.text, (body, answer.text)
    assert people.call("alice", "GET", "/tasks").json()["tasks"] == []


def test_kill_is_for_the_owner_and_ends_the_task(people: People, creator: Creator) -> None:
    command = started(people, "alice", type="command", command=["sleep", "100"])
    assert people.call("bob", "POST", f"/tasks/{command['id']}/kill").status_code == 403
    killed = people.call("alice", "POST", f"/tasks/{command['id']}/kill").json()["task"]
    assert killed["state"] in ("TERMINATING", "TERMINATED")
    again = people.call("alice", "POST", f"/tasks/{command['id']}/kill")
    assert again.status_code == 200


def test_tasks_are_never_preempted() -> None:
    low_task = queue_policy.Holder(trial_id=1, job_id=1, priority=90, slots=1, since=0.0, preemptible=False)
    low_trial = queue_policy.Holder(trial_id=2, job_id=2, priority=80, slots=1, since=1.0)
    jobs = [
        queue_policy.Job(id=1, priority=90, position=1, slots_per_trial=1, held=1, waiting=0),
        queue_policy.Job(id=2, priority=80, position=2, slots_per_trial=1, held=1, waiting=0),
        queue_policy.Job(id=3, priority=1, position=3, slots_per_trial=1, held=0, waiting=1),
    ]
    assert queue_policy.choose_preemptions(2, jobs, [low_task, low_trial]) == {2: 3}


def test_a_task_cannot_start_in_a_pool_the_caller_may_not_use(people: People, creator: Creator) -> None:
    from tests.unit.master.test_queue import set_pool_slots

    set_pool_slots(4, "restricted")
    refused = start(people, "dave", type="notebook", config="resources: {resource_pool: restricted}\n")
    assert refused.status_code == 403
    assert "may not use pool 'restricted'" in refused.json()["detail"]
    assert people.call("dave", "GET", "/tasks").json()["tasks"] == []
    allowed = started(people, "alice", type="notebook", config="resources: {resource_pool: restricted}\n")
    assert allowed["resource_pool"] == "restricted"


def test_an_experiment_cannot_start_in_a_pool_the_caller_may_not_use(
    people: People, creator: Creator
) -> None:
    from tests.unit.master.creating import CONFIG
    from tests.unit.master.test_queue import set_pool_slots

    set_pool_slots(4, "restricted")
    config = CONFIG.replace("  priority: 7\n", "  priority: 7\n  resource_pool: restricted\n")
    refused = creator.create("dave", config)
    assert refused.status_code == 403, refused.text
    assert "may not use pool 'restricted'" in refused.json()["detail"]
    assert creator.count() == 0


def test_a_task_may_only_say_it_listens_where_the_master_told_it(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    notebook = started(people, "alice", type="notebook")
    run_token(people, notebook["id"])
    trial_id = people.call("alice", "GET", f"/tasks/{notebook['id']}").json()["task"]["trial_id"]
    path = f"/api/v1/internal/trials/{trial_id}/task/ready"
    for elsewhere in ("169.254.169.254", "10.0.0.5", "db.internal"):
        refused = people.client.post(
            path, headers=service_headers, json={"port": 80, "secret": "s" * 32, "address": elsewhere}
        )
        assert refused.status_code == 400, refused.text
        assert "listens where the master told it: 127.0.0.1" in refused.json()["detail"]
    assert people.call("alice", "GET", f"/tasks/{notebook['id']}").json()["task"]["ready"] is False
    ok = people.client.post(
        path, headers=service_headers, json={"port": 8888, "secret": "s" * 32, "address": "127.0.0.1"}
    )
    assert ok.status_code == 200, ok.text
    # A pod's address is the cluster network's; never the master's loopback or a link-local one.
    assert tasks._checked_address("10.42.0.7", "127.0.0.1", "kubernetes") == "10.42.0.7"
    for bad in ("localhost", "127.0.0.1", "169.254.169.254", "0.0.0.0", "::1"):
        with pytest.raises(tasks.DetError):
            tasks._checked_address(bad, "10.0.0.1", "kubernetes")
