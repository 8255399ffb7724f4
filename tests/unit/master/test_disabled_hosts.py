"""Hosts and slots an admin disables (`det agent|slot enable|disable`): placement gives them no new
trial, disabling stops what runs there through the job queue's preemption (the trial resumes on an
enabled host, no restart counted) unless --drain lets it finish, and only admins may switch them."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.master import hosts, schema, trials
from det_airflow.master.placement import HostLoad, best_fit, fits_together, place, place_gang
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_hosts import TASK, ask, report, trial_of
from tests.unit.master.test_queue import experiment, set_pool_slots

# --- placement, as pure functions ------------------------------------------------------------------


def test_a_disabled_host_is_full_for_placement() -> None:
    hosts_ = [HostLoad("a", 4, disabled=4), HostLoad("b", 2)]
    assert best_fit(hosts_, 1) == "b"
    assert place_gang(hosts_, 4) is None, "4 slots: only the disabled host has them"
    assert not fits_together(hosts_, 4)
    assert place(hosts_, [1, 1, 1]) == ["b", "b", None]
    assert best_fit([HostLoad("a", 4, disabled=4)], 1) is None


def test_a_disabled_slot_is_one_slot_fewer() -> None:
    host = HostLoad("a", 4, used=1, disabled=1)
    assert (host.enabled_slots, host.free) == (3, 2)
    assert best_fit([host], 2) == "a" and best_fit([host], 3) is None
    # A draining host still holds what runs there, and offers nothing.
    assert HostLoad("a", 4, used=3, disabled=4).free == 0
    # A host placed on keeps its disabled slots.
    assert place([HostLoad("a", 2, disabled=1)], [1, 1]) == ["a", None]


# --- on the master -----------------------------------------------------------------------------


def switch(people: People, user: str, path: str, **body: Any) -> Any:
    return people.call(user, "POST", f"/agents/{path}", json=body or None)


def agent(people: People, host_id: str) -> dict[str, Any]:
    listed = people.call("bob", "GET", "/agents").json()["agents"]
    return next(a for a in listed if a["id"] == host_id)


def start(people: People, e: int, slot: int, host: str) -> int:
    """The trial of the slot's task starts on ``host`` and its program reports."""
    with people.db.begin() as conn:
        answer = trials.acquire(
            conn,
            e,
            slot,
            {
                "dag_id": "det_x",
                "run_id": "r",
                "task_id": "trial",
                "map_index": slot,
                "try_number": 1,
                "host": host,
            },
            dry_run=False,
        )
        assert answer["status"] == "run", answer
        trials.mark_running(conn, trials.get_trial(conn, answer["trial"].id), "its program reported")
        return int(answer["trial"].id)


def asked_to_stop(people: People, trial_id: int) -> bool:
    with people.db.read() as conn:
        return trials.should_preempt(conn, trial_id)


def test_a_disabled_host_gets_no_new_trial_until_enabled(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 4)
    report(people, "b", 4)
    answer = switch(people, "admin", "a/disable")
    assert answer.status_code == 200, answer.text
    assert (answer.json()["agent"]["enabled"], answer.json()["agent"]["draining"]) == (False, False)
    first = experiment(people)
    assert ask(people, first, 0, "a") == {"status": "wait", "host": "b", "queue": "det-host-b"}
    # Every host disabled: the trial waits, rather than run wherever Airflow's executor puts it.
    assert switch(people, "admin", "b/disable").status_code == 200
    second = experiment(people)
    assert ask(people, second, 0, "a") == {"status": "wait"}
    assert trial_of(people, second).host is None
    assert switch(people, "admin", "a/enable").status_code == 200
    assert ask(people, second, 0, "a")["status"] == "run"
    assert agent(people, "a")["enabled"] is True


def test_the_job_list_counts_only_the_slots_an_admin_left_enabled(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 4)
    report(people, "b", 1)
    big = experiment(people, slots_per_trial=4)

    def job() -> dict[str, Any]:
        (only,) = [j for j in people.call("bob", "GET", "/jobs").json()["jobs"] if j["id"] == big]
        return only

    assert (job()["largest_host_slots"], job()["fits_hosts"]) == (4, True)
    assert people.call("admin", "POST", "/agents/a/slots/0/disable").status_code == 200
    assert (job()["largest_host_slots"], job()["fits_hosts"]) == (3, False), "neither 3 + 1 nor 2 x 2"
    assert switch(people, "admin", "a/disable").status_code == 200
    assert (job()["largest_host_slots"], job()["fits_hosts"]) == (1, False)
    assert switch(people, "admin", "a/enable").status_code == 200
    assert (job()["largest_host_slots"], job()["fits_hosts"]) == (4, True)


def test_a_disabled_slot_gets_no_new_trial_until_enabled(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 2)
    assert switch(people, "admin", "a/slots/1/disable").status_code == 200
    shown = agent(people, "a")
    assert shown["enabled"] is True
    assert [s["enabled"] for s in shown["slots"]] == [True, False]
    pair = experiment(people, slots_per_trial=2)
    assert ask(people, pair, 0, "a") == {"status": "wait"}, "2 slots on a host with one enabled"
    single = experiment(people)
    assert ask(people, single, 0, "a")["status"] == "run"
    with people.db.read() as conn:
        assert [(h.id, h.free) for h in hosts.loads(conn)] == [("a", 0)]
    assert switch(people, "admin", "a/slots/1/enable").status_code == 200
    assert [s["enabled"] for s in agent(people, "a")["slots"]] == [True, True]
    with people.db.read() as conn:
        assert [(h.id, h.free) for h in hosts.loads(conn)] == [("a", 1)]


def test_a_trial_starting_on_a_gpu_host_is_told_which_devices_are_disabled(
    people: People, creator: Creator
) -> None:
    set_pool_slots(64)
    inventory = {"slot_type": "cuda", "slots": 3, "devices": [2, 5, 7], "queue": "det-host-g"}
    with people.db.begin() as conn:
        hosts.report(conn, "g", {**inventory, "address": "g"})
    e = experiment(people, trials_=2)

    def disabled_devices(slot: int) -> list[int]:
        with people.db.begin() as conn:
            answer = trials.acquire(conn, e, slot, {**TASK, "map_index": slot, "host": "g"}, dry_run=False)
        assert answer["status"] == "run", answer
        return list(answer["spec"]["disabled_devices"])

    assert disabled_devices(0) == []
    assert people.call("admin", "POST", "/agents/g/slots/1/disable").status_code == 200
    assert [(s["device"], s["enabled"]) for s in agent(people, "g")["slots"]] == [
        (2, True),
        (5, False),
        (7, True),
    ]
    assert disabled_devices(1) == [5], "slot 1 is the host's second device: 5"


def test_disabling_a_host_preempts_its_trial_which_resumes_on_another(
    people: People, creator: Creator
) -> None:
    set_pool_slots(64)
    report(people, "a", 1)
    report(people, "b", 1)
    e = experiment(people)
    trial_id = start(people, e, 0, "a")
    assert not asked_to_stop(people, trial_id)
    assert switch(people, "admin", "a/disable").status_code == 200
    assert asked_to_stop(people, trial_id), "should_preempt() tells the trial to checkpoint and exit"
    with people.db.begin() as conn:
        trials.exit_run(conn, trial_id, 0)
    back = trial_of(people, e)
    assert (back.state, back.restarts) == ("QUEUED", 0), "a preemption counts no restart"
    history = people.call("alice", "GET", f"/trials/{trial_id}/state-changes").json()["state_changes"]
    assert history[-1]["reason"] == "preempted: agent 'a' was disabled; its process exited 0"
    assert ask(people, e, 0, "a") == {"status": "wait", "host": "b", "queue": "det-host-b"}


def test_draining_lets_the_running_trial_finish(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 2)
    report(people, "b", 2)
    e = experiment(people, trials_=2)
    trial_id = start(people, e, 0, "a")
    answer = switch(people, "admin", "a/disable", drain=True)
    assert answer.status_code == 200, answer.text
    drained = answer.json()["agent"]
    assert (drained["enabled"], drained["draining"]) == (False, True)
    assert [s["trial_id"] for s in drained["slots"]] == [trial_id, None]
    assert not asked_to_stop(people, trial_id)
    assert ask(people, e, 1, "a")["host"] == "b", "the next trial goes to the enabled host"


def test_disabling_a_slot_preempts_the_trial_shown_on_it(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 2)
    e = experiment(people, trials_=2)
    first, second = start(people, e, 0, "a"), start(people, e, 1, "a")
    assert [s["trial_id"] for s in agent(people, "a")["slots"]] == [first, second]
    assert switch(people, "admin", "a/slots/1/disable").status_code == 200
    assert (asked_to_stop(people, first), asked_to_stop(people, second)) == (False, True)
    with people.db.begin() as conn:
        trials.exit_run(conn, second, 143)
    history = people.call("alice", "GET", f"/trials/{second}/state-changes").json()["state_changes"]
    assert history[-1]["reason"] == "preempted: a slot of agent 'a' was disabled; its process exited 143"


def test_a_host_stays_disabled_when_its_worker_restarts(people: People, creator: Creator) -> None:
    report(people, "a", 2)
    assert switch(people, "admin", "a/disable", drain=True).status_code == 200
    with people.db.begin() as conn:
        hosts.leave(conn, "a")
    report(people, "a", 2)
    assert (agent(people, "a")["enabled"], agent(people, "a")["draining"]) == (False, True)


@pytest.mark.parametrize(
    ("user", "path", "status", "detail"),
    [
        ("alice", "a/disable", 403, "user 'alice' may not disable agent 'a': only admins may"),
        ("bob", "a/slots/0/enable", 403, "user 'bob' may not enable slot 0 of agent 'a': only admins may"),
        ("admin", "nope/disable", 404, "agent 'nope' not found (the master's agents: a)"),
        ("admin", "a/slots/2/disable", 404, "agent 'a' has no slot 2 (its slots: 0 to 1)"),
        ("admin", "a/slots/-1/disable", 404, "agent 'a' has no slot -1 (its slots: 0 to 1)"),
    ],
)
def test_refusals_name_what_is_wrong_and_change_nothing(
    people: People, user: str, path: str, status: int, detail: str
) -> None:
    report(people, "a", 2)
    answer = switch(people, user, path)
    assert answer.status_code == status
    assert detail in answer.json()["detail"]
    with people.db.read() as conn:
        assert conn.execute(schema.host_switches.select()).all() == []
