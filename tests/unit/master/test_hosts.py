"""Worker hosts on the master: heartbeats, placement of each admitted trial's gang on one host
(best fit, never more slots than a host reported), the slot's task routed to that host, and what
`det agent list` and each trial's record show."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.master import airflow_bridge, hosts, schema, trials
from det_airflow.master.lifecycle import now
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_queue import end_runs, experiment, set_pool_slots

TASK = {"dag_id": "det_x", "run_id": "r", "task_id": "trial", "map_index": 0, "try_number": 1}


def report(people: People, host_id: str, slots: int) -> None:
    inventory = {"slot_type": "cpu", "slots": slots, "devices": [], "queue": f"det-host-{host_id}"}
    with people.db.begin() as conn:
        hosts.report(conn, host_id, {**inventory, "address": host_id})


def ask(people: People, e: int, slot: int, host: str | None, *, dry_run: bool = False) -> dict[str, Any]:
    with people.db.begin() as conn:
        answer = trials.acquire(conn, e, slot, {**TASK, "map_index": slot, "host": host}, dry_run=dry_run)
    return {k: v for k, v in answer.items() if k in ("status", "host", "queue")}


def trial_of(people: People, e: int) -> Any:
    with people.db.read() as conn:
        return conn.execute(schema.trials.select().where(schema.trials.c.experiment_id == e)).first()


def test_a_gang_goes_to_the_host_it_fills_most_tightly(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "big", 4)
    report(people, "small", 2)
    e = experiment(people, slots_per_trial=2)
    # The task asked from the 4-slot host; the 2-slot host fits the gang exactly.
    assert ask(people, e, 0, "big") == {"status": "wait", "host": "small", "queue": "det-host-small"}
    held = trial_of(people, e)
    assert (held.host, held.slot, held.state) == ("small", 0, "QUEUED"), "the slot holds it until it moves"
    assert ask(people, e, 0, "small")["status"] == "run"
    ran = trial_of(people, e)
    assert (ran.host, ran.hosts, ran.state) == ("small", ["small"], "STARTING")


def test_no_host_is_given_more_slots_than_it_reported(people: People, creator: Creator) -> None:
    set_pool_slots(64)  # the pool would admit all of them: the hosts decide
    report(people, "a", 2)
    report(people, "b", 2)
    e = experiment(people, slots_per_trial=1, trials_=5)
    placed = []
    for slot in range(5):
        answer = ask(people, e, slot, None)
        placed.append(answer.get("host") if answer["status"] == "wait" else trial_of_slot(people, e, slot))
    assert sorted(p for p in placed if p) == ["a", "a", "b", "b"]
    assert placed[4] is None, "a fifth 1-slot trial was placed on 4 slots"
    with people.db.read() as conn:
        assert {h.id: h.used for h in hosts.loads(conn)} == {"a": 2, "b": 2}
    end_runs(people, e)
    with people.db.read() as conn:
        assert {h.id: h.used for h in hosts.loads(conn)} == {"a": 0, "b": 0}


def trial_of_slot(people: People, e: int, slot: int) -> str | None:
    with people.db.read() as conn:
        row = conn.execute(
            schema.trials.select().where(schema.trials.c.experiment_id == e, schema.trials.c.slot == slot)
        ).first()
    return None if row is None else row.host


def test_a_gang_larger_than_any_free_host_waits_for_one_whole_host(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 4)
    report(people, "b", 4)
    small = experiment(people, slots_per_trial=1, trials_=2)
    assert ask(people, small, 0, "a")["status"] == "run"
    assert ask(people, small, 1, "b")["host"] == "a", "best fit keeps host b whole"
    assert ask(people, small, 1, "a")["status"] == "run"
    big = experiment(people, slots_per_trial=4)
    assert ask(people, big, 0, "a") == {"status": "wait", "host": "b", "queue": "det-host-b"}
    third = experiment(people, slots_per_trial=3)
    assert ask(people, third, 0, "a") == {"status": "wait"}, "3 slots on a host with 2 free"


def test_the_job_list_says_when_no_live_hosts_can_take_a_gang(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    assert [j["largest_host_slots"] for j in people.call("bob", "GET", "/jobs").json()["jobs"]] == []
    big = experiment(people, slots_per_trial=8)
    (job,) = people.call("bob", "GET", "/jobs").json()["jobs"]
    assert (job["largest_host_slots"], job["fits_hosts"]) == (None, None)
    report(people, "a", 2)
    report(people, "b", 4)
    assert ask(people, big, 0, "a") == {"status": "wait"}, "8 slots: neither 2 x 4 nor 4 x 2 fit a 2 and a 4"
    (job,) = people.call("bob", "GET", "/jobs").json()["jobs"]
    assert (job["id"], job["slots_per_trial"], job["largest_host_slots"], job["fits_hosts"]) == (
        big,
        8,
        4,
        False,
    )
    report(people, "c", 4)
    (job,) = people.call("bob", "GET", "/jobs").json()["jobs"]
    assert job["fits_hosts"] is True, "two hosts of 4 take it in two nodes"


def test_a_host_whose_heartbeat_stopped_offers_nothing(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "gone", 8)
    report(people, "here", 1)
    with people.db.begin() as conn:
        conn.execute(
            update(schema.hosts)
            .where(schema.hosts.c.id == "gone")
            .values(last_seen=now() - timedelta(minutes=5))
        )
    e = experiment(people, slots_per_trial=2)
    assert ask(people, e, 0, "here") == {"status": "wait"}
    listed = {a["id"]: a["alive"] for a in people.call("alice", "GET", "/agents").json()["agents"]}
    assert listed == {"gone": False, "here": True}


def test_without_hosts_admission_is_the_pools_alone(people: People, creator: Creator) -> None:
    set_pool_slots(2)
    e = experiment(people, slots_per_trial=2)
    assert ask(people, e, 0, "this-machine")["status"] == "run"
    ran = trial_of(people, e)
    assert (ran.host, ran.hosts) == ("this-machine", ["this-machine"]), "where the run ran is kept"


def test_agent_list_shows_each_slot_and_the_trial_holding_it(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "w1", 3)
    e = experiment(people, slots_per_trial=2)
    assert ask(people, e, 0, "w1")["status"] == "run"
    (agent,) = people.call("bob", "GET", "/agents").json()["agents"]
    trial_id = trial_of(people, e).id
    assert (agent["num_slots"], agent["used_slots"], agent["queue"]) == (3, 2, "det-host-w1")
    assert [s["trial_id"] for s in agent["slots"]] == [trial_id, trial_id, None]
    assert agent["slots"][0]["task_name"] == f"Trial {trial_id} (Experiment {e})"
    jobs = people.call("bob", "GET", "/jobs").json()["jobs"]
    assert [j["hosts"] for j in jobs if j["id"] == e] == [["w1"]]
    assert people.call("alice", "GET", f"/trials/{trial_id}").json()["trial"]["hosts"] == ["w1"]


def test_a_heartbeat_registers_the_host_and_a_shutdown_removes_it(
    people: People, service_headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    body = {"slot_type": "cuda", "slots": 2, "devices": [2, 3], "queue": "det-host-gpu1", "address": "gpu1"}
    answer = people.client.put("/api/v1/internal/hosts/gpu1", json=body, headers=service_headers)
    assert answer.status_code == 200, answer.text
    host = answer.json()
    assert (host["alive"], host["num_slots"], host["used_slots"]) == (True, 2, 0)
    assert [(s["slot_id"], s["device"]) for s in host["slots"]] == [(0, 2), (1, 3)]
    again = people.client.put("/api/v1/internal/hosts/gpu1", json=body, headers=service_headers).json()
    assert again["registered_time"] == host["registered_time"]
    assert people.client.delete("/api/v1/internal/hosts/gpu1", headers=service_headers).status_code == 200
    assert people.call("alice", "GET", "/agents").json() == {"agents": []}


def test_on_the_local_executor_the_agent_list_is_this_machine_with_the_trials_it_runs(
    people: People, creator: Creator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make quickstart`: the LocalExecutor, no worker host reporting; the trial's task ran here.
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    monkeypatch.setenv("AIRFLOW__DET__HOST_ID", "laptop")
    monkeypatch.setenv("AIRFLOW__DET__HOST_SLOTS", "3")
    set_pool_slots(8)
    e = experiment(people, slots_per_trial=2)
    assert ask(people, e, 0, "laptop")["status"] == "run"
    (agent,) = people.call("bob", "GET", "/agents").json()["agents"]
    trial_id = trial_of(people, e).id
    assert (agent["id"], agent["alive"], agent["slot_type"], agent["num_slots"], agent["used_slots"]) == (
        "laptop",
        True,
        "cpu",
        3,
        2,
    )
    assert [s["trial_id"] for s in agent["slots"]] == [trial_id, trial_id, None]
    refused = people.call("admin", "POST", "/agents/laptop/disable")
    assert refused.status_code == 409
    assert "LocalExecutor runs every task on" in refused.json()["detail"]
    # Once a worker host reports, the list is the hosts that report; on Celery, no host is none.
    report(people, "w1", 4)
    assert [a["id"] for a in people.call("bob", "GET", "/agents").json()["agents"]] == ["w1"]
    with people.db.begin() as conn:
        hosts.leave(conn, "w1")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    assert people.call("bob", "GET", "/agents").json() == {"agents": []}


def test_only_the_service_reports_hosts(people: People, service_headers: dict[str, str]) -> None:
    body = {"slot_type": "cpu", "slots": 2, "queue": "det-host-x"}
    answer = people.client.put("/api/v1/internal/hosts/x", json=body)
    assert answer.status_code == 401
    answer = people.call("admin", "PUT", "/internal/hosts/x", json=body)
    assert answer.status_code == 403, "a person's login is not the service token"
    with people.db.read() as conn:
        assert hosts.all_hosts(conn) == []


@pytest.mark.parametrize(
    ("host_id", "body", "field"),
    [
        ("bad host", {"slot_type": "cpu", "slots": 2, "queue": "q"}, "host_id"),
        ("x", {"slot_type": "tpu", "slots": 2, "queue": "q"}, "slot_type"),
        ("x", {"slot_type": "cpu", "slots": -1, "queue": "q"}, "slots"),
    ],
)
def test_a_bad_report_is_refused_naming_the_field(
    people: People, service_headers: dict[str, str], host_id: str, body: dict[str, Any], field: str
) -> None:
    answer = people.client.put(f"/api/v1/internal/hosts/{host_id}", json=body, headers=service_headers)
    assert answer.status_code == 422
    assert field in answer.text
    with people.db.read() as conn:
        assert hosts.all_hosts(conn) == []


def test_a_trial_placed_on_a_host_that_went_away_is_placed_again(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 2)
    report(people, "b", 4)
    e = experiment(people, slots_per_trial=2)
    assert ask(people, e, 0, "b")["host"] == "a"
    with people.db.begin() as conn:
        hosts.leave(conn, "a")  # its worker shut down before the task moved there
    # The task, sent back to the default queue, lands on b: the trial is placed there and runs.
    assert ask(people, e, 0, "b")["status"] == "run"
    assert trial_of(people, e).hosts == ["b"]


# --- slots sent to their trial's host before their task starts (housekeeping `start waiting slots`) ---


class Bridge:
    """What `start waiting slots` tells Airflow, with the slots Airflow has: a run whose slots 0 and
    2 have not started (waiting for their pool) and whose slot 1 is deferred."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, routable: tuple[int, ...] = (0, 2)) -> None:
        self.routed: dict[int, str] = {}
        self.started: dict[int, str] = {}
        monkeypatch.setattr(
            airflow_bridge,
            "slots_waiting_for_trials",
            lambda runs: {
                dag_id: ("the-run", airflow_bridge.WaitingSlots(deferred=[1], unstarted=[0, 2]))
                for dag_id in runs
            },
        )

        def route(dag_id: str, run_id: str, queues: dict[int, str]) -> list[int]:
            assert run_id == "the-run"
            sent = {slot: queue for slot, queue in queues.items() if slot in routable}
            self.routed.update(sent)
            return sorted(sent)

        def start(dag_id: str, run_id: str, slots: list[int], queues: dict[int, str]) -> list[int]:
            self.started.update({slot: queues[slot] for slot in slots})
            return slots

        monkeypatch.setattr(airflow_bridge, "route_unstarted_slots", route)
        monkeypatch.setattr(airflow_bridge, "start_deferred_slots_anew", start)


def slot_trials(people: People, e: int) -> dict[int, tuple[int, str | None]]:
    with people.db.read() as conn:
        rows = conn.execute(schema.trials.select().where(schema.trials.c.experiment_id == e)).all()
    return {row.slot: (row.id, row.host) for row in rows if row.slot is not None}


def with_dag(people: People, e: int) -> None:
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(dag_id=f"det_{e}"))


@pytest.fixture
def two_hosts(people: People, creator: Creator) -> None:
    """Hosts a (2 slots) and b (1 slot) in a pool with room."""
    set_pool_slots(64)
    report(people, "a", 2)
    report(people, "b", 1)


def test_unstarted_slots_are_given_trials_first_and_sent_to_their_hosts(
    people: People, two_hosts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = experiment(people, trials_=3)
    with_dag(people, e)  # its run not linked yet: no slot has asked
    bridge = Bridge(monkeypatch)

    started = trials.start_waiting_slots(people.db)

    held = slot_trials(people, e)
    # Best fit: the 1-slot host first, then the other; the deferred slot only once the unstarted
    # ones hold trials (it needs a new try of its task, they start anyway).
    assert [held[slot][1] for slot in (0, 2, 1)] == ["b", "a", "a"]
    assert bridge.routed == {0: "det-host-b", 2: "det-host-a"}
    assert bridge.started == {1: "det-host-a"}
    assert sorted(started) == sorted(trial for trial, _ in held.values())


def test_a_slot_the_scheduler_sent_meanwhile_keeps_its_trial_and_moves_when_it_asks(
    people: People, two_hosts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = experiment(people, trials_=1)
    with_dag(people, e)
    bridge = Bridge(monkeypatch, routable=())  # slot 0 was queued on Airflow's default queue

    assert trials.start_waiting_slots(people.db) == []

    assert bridge.routed == {} and bridge.started == {}
    assert slot_trials(people, e)[0][1] == "b"
    # Its task lands on host a: it is told to move to b, where its trial is placed.
    assert ask(people, e, 0, "a") == {"status": "wait", "host": "b", "queue": "det-host-b"}
    assert ask(people, e, 0, "b")["status"] == "run"


def test_a_slot_whose_trial_ended_keeps_its_host_for_the_next_trial(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    """Trials of four slots on two hosts end together. Each slot is given its next trial on its own
    host as its trial's exit is recorded, so a slot asking in between is not placed on the host
    another slot just freed (best fit would prefer its one free slot) and no task moves."""
    set_pool_slots(64)
    report(people, "a", 2)
    report(people, "b", 2)
    e = experiment(people, trials_=8)
    running = {
        slot: ask_run(people, e, slot, host) for slot, host in ((0, "a"), (1, "a"), (2, "b"), (3, "b"))
    }

    for slot in (0, 3, 2, 1):
        exited = people.client.post(
            f"/api/v1/internal/trials/{running[slot]}/exit", json={"exit_code": 0}, headers=service_headers
        )
        assert exited.status_code == 200, exited.text

    nexts = {slot: ask(people, e, slot, host) for slot, host in ((2, "b"), (0, "a"), (3, "b"), (1, "a"))}
    assert nexts == {slot: {"status": "run"} for slot in range(4)}
    held = slot_trials(people, e)
    assert {slot: held[slot][1] for slot in range(4)} == {0: "a", 1: "a", 2: "b", 3: "b"}
    assert {held[slot][0] for slot in range(4)}.isdisjoint(running.values())


def ask_run(people: People, e: int, slot: int, host: str) -> int:
    """The trial the slot on ``host`` runs now."""
    with people.db.begin() as conn:
        answer = trials.acquire(conn, e, slot, {**TASK, "map_index": slot, "host": host}, dry_run=False)
    assert answer["status"] == "run", answer
    return int(answer["trial"].id)


def test_a_slot_whose_trial_failed_takes_no_next_trial(
    people: People, two_hosts: None, service_headers: dict[str, str]
) -> None:
    """A trial that ends in ERROR fails its slot's task (no restart left): the next trial is not
    held by that slot, so another slot runs it."""
    e = experiment(people, trials_=2)
    row = people.experiment(e)
    with people.db.begin() as conn:
        conn.execute(
            update(schema.experiments)
            .where(schema.experiments.c.id == e)
            .values(config={**row.config, "max_restarts": 0})
        )
    failing = ask_run(people, e, 0, "b")

    exited = people.client.post(
        f"/api/v1/internal/trials/{failing}/exit", json={"exit_code": 1}, headers=service_headers
    )

    assert exited.status_code == 200, exited.text
    assert exited.json()["trial"]["state"] == "ERROR"
    assert slot_trials(people, e) == {0: (failing, "b")}  # the next trial is held by no slot
    assert ask(people, e, 1, "b") == {"status": "run"}
