"""Multi-node trials on the master: a trial larger than every host is placed on several at once,
its chief's run records its nodes, each node task gets its part on its own host with a token of its
own, a failing node stops the gang, and the restart places and starts every node again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from det_airflow.master import gangs, hosts, schema, trials
from det_airflow.master.lifecycle import now
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.test_hosts import TASK, report, trial_of
from tests.unit.master.test_queue import experiment, set_pool_slots


def chief(people: People, e: int, host: str, *, port: int = 29555) -> dict[str, Any]:
    with people.db.begin() as conn:
        return trials.acquire(conn, e, 0, {**TASK, "host": host, "port": port}, dry_run=False)


def node(people: People, e: int, rank: int, host: str | None, *, dry_run: bool = False) -> dict[str, Any]:
    task = {**TASK, "task_id": "trial_node", "map_index": rank - 1, "host": host}
    with people.db.begin() as conn:
        return trials.acquire_node(conn, e, 0, rank, task, dry_run=dry_run)


def gang_on_two_hosts(people: People) -> int:
    """Hosts a and b of 2 slots each, and an experiment whose trials take 4: larger than either."""
    set_pool_slots(64)
    report(people, "a", 2)
    report(people, "b", 2)
    return experiment(people, slots_per_trial=4)


def status(people: People, trial_id: int, headers: dict[str, str]) -> dict[str, Any]:
    answer = people.client.get(f"/api/v1/internal/trials/{trial_id}", headers=headers)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_trial_larger_than_every_host_runs_on_two_with_a_part_each(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    e = gang_on_two_hosts(people)
    assert node(people, e, 1, "b") == {"status": "wait"}, "no run needs node 1 yet"
    answer = chief(people, e, "a")
    assert answer["status"] == "run"
    assert answer["spec"]["gang"] == {"addrs": ["a", "b"], "rank": 0, "slots": 2, "port": 29555}
    trial_id = answer["trial"].id
    with people.db.read() as conn:
        assert {h.id: h.used for h in hosts.loads(conn)} == {"a": 2, "b": 2}, "each host holds its share"
        assert hosts.holdings(conn, "b") == {"b": [(trial_id, e, 2)]}, "b's heartbeat sees its share"
    assert node(people, e, 1, "a") == {"status": "wait", "host": "b", "queue": "det-host-b"}
    assert node(people, e, 2, "b") == {"status": "wait"}, "two nodes: there is no rank 2"
    assert node(people, e, 1, "b", dry_run=True) == {"status": "run"}
    part = node(people, e, 1, "b")
    assert part["status"] == "run"
    assert part["spec"]["gang"] == {"addrs": ["a", "b"], "rank": 1, "slots": 2, "port": 29555}
    assert part["token"] != answer["token"]
    assert node(people, e, 1, "b") == {"status": "wait"}, "node 1 of this run has started already"
    assert trial_of(people, e).hosts == ["a", "b"]
    # The node's token is the trial's for the run: its training code may report as the trial.
    reported = people.client.post(
        f"/api/v1/runtime/trials/{trial_id}/progress",
        json={"progress": 0.5},
        headers={"Authorization": f"Bearer {part['token']}"},
    )
    assert reported.status_code == 200, reported.text
    assert status(people, trial_id, service_headers)["gang_failed"] is None


def test_one_failing_node_stops_the_gang_and_the_restart_starts_every_node_again(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    e = gang_on_two_hosts(people)
    people.experiment(e)
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
    first = chief(people, e, "a")
    trial_id, run = first["trial"].id, first["spec"]["run_id"]
    part = node(people, e, 1, "b")
    assert part["spec"]["run_id"] == run
    exited = people.client.post(
        f"/api/v1/internal/trials/{trial_id}/nodes/1/exit",
        json={"run_id": run, "exit_code": 3},
        headers=service_headers,
    )
    assert exited.status_code == 200, exited.text
    seen = status(people, trial_id, service_headers)
    assert seen["gang_failed"] == "node 1 on host b exited 3"
    assert seen["run_id"] == run
    stale = people.client.post(
        f"/api/v1/runtime/trials/{trial_id}/progress",
        json={"progress": 0.5},
        headers={"Authorization": f"Bearer {part['token']}"},
    )
    assert stale.status_code == 403, "an exited node's token is void"
    # The chief, stopped for the gang, exits non-zero: the trial restarts.
    with people.db.begin() as conn:
        trial, retry = trials.exit_run(conn, trial_id, 143)
    assert (trial.state, trial.restarts, retry) == ("QUEUED", 1, True)
    again = chief(people, e, "a", port=29556)
    assert again["status"] == "run" and again["spec"]["run_id"] == run + 1
    assert again["spec"]["gang"]["port"] == 29556
    assert status(people, trial_id, service_headers)["gang_failed"] is None, "the new run starts clean"
    assert node(people, e, 1, "b")["spec"]["run_id"] == run + 1
    with people.db.begin() as conn:
        trials.exit_run(conn, trial_id, 0)
    assert node(people, e, 1, "b") == {"status": "done"}, "the search is done and its trial ended"


def test_a_trial_that_fits_one_host_is_never_split(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    report(people, "a", 4)
    report(people, "b", 2)
    report(people, "c", 2)
    busy = experiment(people, slots_per_trial=3)
    assert chief(people, busy, "a")["status"] == "run", "only a takes 3 slots"
    with people.db.read() as conn:
        placed_whole = select(schema.trials.c.id).where(
            schema.trials.c.experiment_id == busy, schema.trials.c.nodes.is_(None)
        )
        assert conn.execute(placed_whole).all(), "SQL NULL, which another host's heartbeat skips"
        assert hosts.holdings(conn, "b") == {}
    e = experiment(people, slots_per_trial=4)
    assert chief(people, e, "b") == {"status": "wait"}, "b and c together have room, but a alone fits it"
    assert trial_of(people, e).nodes is None


def test_a_node_task_no_run_needs_ends_and_is_done_once_the_slot_is(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    e = experiment(people, slots_per_trial=4)
    assert node(people, e, 1, None) == {"status": "wait"}, "it ends; the master starts it when a run needs it"
    with people.db.begin() as conn:
        conn.execute(
            update(schema.trials).where(schema.trials.c.experiment_id == e).values(state="COMPLETED")
        )
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
    assert node(people, e, 1, None) == {"status": "done"}


def test_a_kubernetes_trial_takes_no_host_slots(people: People, creator: Creator) -> None:
    e = gang_on_two_hosts(people)
    row = people.experiment(e)
    config = {**row.config, "airflow": {"trial_runner": "kubernetes"}}
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(config=config))
    answer = chief(people, e, "a")
    assert answer["status"] == "run" and "gang" not in answer["spec"], "its pods are placed by the cluster"
    with people.db.read() as conn:
        assert {h.id: h.used for h in hosts.loads(conn)} == {"a": 0, "b": 0}


def test_a_node_that_waits_still_starts_when_its_experiment_is_stopping(
    people: People, creator: Creator
) -> None:
    e = gang_on_two_hosts(people)
    chief(people, e, "a")
    with people.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == e).values(state="STOPPING_CANCELED")
        )
    assert node(people, e, 1, "b")["status"] == "run", "the gang starts, and stops as asked"


def test_a_node_token_is_void_once_its_run_ended(people: People, creator: Creator) -> None:
    e = gang_on_two_hosts(people)
    trial_id = chief(people, e, "a")["trial"].id
    token = node(people, e, 1, "b")["token"]

    def progress() -> int:
        headers = {"Authorization": f"Bearer {token}"}
        path = f"/api/v1/runtime/trials/{trial_id}/progress"
        return int(people.client.post(path, json={"progress": 0.5}, headers=headers).status_code)

    assert progress() == 200
    with people.db.begin() as conn:
        trials.exit_run(conn, trial_id, 0)  # the chief ended the run; the node never reported
    assert progress() == 403


def test_a_node_that_does_not_start_in_time_fails_the_run(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    e = gang_on_two_hosts(people)
    trial_id = chief(people, e, "a")["trial"].id
    with people.db.begin() as conn:
        started = now() - timedelta(seconds=gangs.NODE_START_SECONDS + 1)
        conn.execute(update(schema.trial_nodes).where(schema.trial_nodes.c.rank == 1).values(since=started))
    assert status(people, trial_id, service_headers)["gang_failed"] == (
        f"node 1 on host b did not start within {gangs.NODE_START_SECONDS} s"
    )


def test_a_gang_placed_on_a_host_gone_since_is_placed_again(people: People, creator: Creator) -> None:
    set_pool_slots(64)
    for host in ("a", "b", "c", "d"):
        report(people, host, 2)
    busy = experiment(people, slots_per_trial=2)
    assert chief(people, busy, "c")["status"] == "run"
    e = experiment(people, slots_per_trial=4)
    assert chief(people, e, "c") == {"status": "wait", "host": "a", "queue": "det-host-a"}, "placed on a + b"
    with people.db.begin() as conn:
        conn.execute(
            update(schema.hosts).where(schema.hosts.c.id == "b").values(last_seen=now().replace(year=2000))
        )
    answer = chief(people, e, "a")
    assert answer["status"] == "run" and answer["spec"]["gang"]["addrs"] == ["a", "d"]


@pytest.mark.parametrize("whose", ["chief", "node"])
def test_a_run_whose_node_host_stops_heartbeating_is_lost(
    people: People, creator: Creator, service_headers: dict[str, str], whose: str
) -> None:
    e = gang_on_two_hosts(people)
    trial_id = chief(people, e, "a")["trial"].id
    node(people, e, 1, "b")
    gone = "a" if whose == "chief" else "b"
    with people.db.begin() as conn:
        conn.execute(
            update(schema.hosts).where(schema.hosts.c.id == gone).values(last_seen=now().replace(year=2000))
        )
        lost = trials._lost_runs(conn, schema.trials.c.id == trial_id)
        with_gang = gangs.failure(conn, trials.get_trial(conn, trial_id))
    assert lost[trial_id][1].startswith(f"its host {gone} stopped heartbeating")
    assert with_gang is not None and f"host {gone} stopped heartbeating" in with_gang
