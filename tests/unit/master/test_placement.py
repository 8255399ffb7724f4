"""Where admitted trials run (master/placement.py): best fit over the live hosts, repeatable ties,
never more slots on a host than it reported. Each test states the invariant it checks."""

from __future__ import annotations

import random

from det_airflow.master.placement import (
    MAX_NODES,
    HostLoad,
    Node,
    best_fit,
    fits_any,
    fits_together,
    node_map_index,
    node_ranks,
    place,
    place_gang,
)


def test_best_fit_takes_the_host_the_gang_fills_most_tightly() -> None:
    hosts = [HostLoad("roomy", 8, used=0), HostLoad("tight", 8, used=6), HostLoad("middle", 8, used=4)]
    assert best_fit(hosts, 2) == "tight"
    assert best_fit(hosts, 3) == "middle"
    assert best_fit(hosts, 5) == "roomy"


def test_a_small_trial_leaves_a_whole_host_free_for_a_big_one() -> None:
    hosts = [HostLoad("a", 4), HostLoad("b", 4, used=2)]
    assert best_fit(hosts, 1) == "b"
    assert place(hosts, [1, 4]) == ["b", "a"]


def test_equal_fits_go_to_the_lowest_host_id_whatever_the_order() -> None:
    hosts = [HostLoad("h2", 4), HostLoad("h10", 4), HostLoad("h1", 4)]
    assert best_fit(hosts, 2) == "h1"
    assert best_fit(list(reversed(hosts)), 2) == "h1"


def test_no_room_anywhere_is_none() -> None:
    hosts = [HostLoad("a", 4, used=3), HostLoad("b", 2, used=1)]
    assert best_fit(hosts, 2) is None
    assert best_fit([], 1) is None


def test_a_host_reporting_fewer_slots_than_its_trials_hold_has_no_room() -> None:
    shrunk = HostLoad("a", 2, used=4)
    assert shrunk.free == 0
    assert best_fit([shrunk], 1) is None


def test_place_never_gives_a_host_more_than_its_slots() -> None:
    rng = random.Random(7)
    hosts = [HostLoad(f"h{i:02d}", rng.choice((2, 4, 8)), used=rng.randint(0, 2)) for i in range(12)]
    gangs = [rng.choice((1, 2, 4, 8)) for _ in range(200)]
    placed = place(hosts, gangs)
    taken = {host.id: host.used for host in hosts}
    for gang, host_id in zip(gangs, placed, strict=True):
        if host_id is not None:
            taken[host_id] += gang
    assert None in placed and len(set(placed)) > 6  # the hosts filled up, and many took trials
    assert all(taken[host.id] <= host.slots for host in hosts)
    # Everything that stayed unplaced really found no room among what the others left.
    left = [HostLoad(h.id, h.slots, taken[h.id]) for h in hosts]
    assert all(
        best_fit(left, gang) is None for gang, host_id in zip(gangs, placed, strict=True) if not host_id
    )


def test_place_fills_in_queue_order_and_skips_what_does_not_fit() -> None:
    hosts = [HostLoad("a", 4), HostLoad("b", 2)]
    assert place(hosts, [2, 4, 2, 1, 1]) == ["b", "a", None, None, None]
    assert place(hosts, [1, 1, 1]) == ["b", "b", "a"]


def test_a_gang_larger_than_every_host_is_placed_nowhere() -> None:
    hosts = [HostLoad("a", 8), HostLoad("b", 8)]
    assert best_fit(hosts, 9) is None
    assert place(hosts, [9, 1]) == [None, "a"]


def test_fits_any_counts_slots_in_use_as_free_later() -> None:
    hosts = [HostLoad("a", 4, used=4), HostLoad("b", 2)]
    assert fits_any(hosts, 4)
    assert not fits_any(hosts, 5)
    assert not fits_any([], 1)


def test_a_gang_larger_than_every_host_is_split_into_the_fewest_equal_nodes() -> None:
    hosts = [HostLoad("a", 2), HostLoad("b", 2), HostLoad("c", 3)]
    assert place_gang(hosts, 4) == [Node("a", 2), Node("b", 2)], "two nodes of 2, the tightest fits"
    assert place_gang(hosts, 6) == [Node("a", 2), Node("b", 2), Node("c", 2)], (
        "6 = 3 x 2 (no 2 hosts have 3 free)"
    )
    assert place_gang([HostLoad("a", 2), HostLoad("b", 4)], 8) is None, "neither 2 x 4 nor 4 x 2 fit"
    assert place_gang([HostLoad("a", 3), HostLoad("b", 3)], 5) is None, "5 slots split into no equal shares"


def test_a_gang_one_host_could_take_is_never_split_even_when_that_host_is_busy() -> None:
    hosts = [HostLoad("big", 4, used=1), HostLoad("a", 2), HostLoad("b", 2)]
    assert place_gang(hosts, 4) is None
    assert place_gang(hosts, 3) == [Node("big", 3)]


def test_the_asking_host_is_the_chief_when_it_is_one_of_the_nodes() -> None:
    hosts = [HostLoad("a", 2), HostLoad("b", 2)]
    assert place_gang(hosts, 4, prefer="b") == [Node("b", 2), Node("a", 2)]
    assert place_gang(hosts, 4, prefer="elsewhere") == [Node("a", 2), Node("b", 2)]


def test_no_slot_is_leased_twice_across_nodes() -> None:
    rng = random.Random(7)
    for _ in range(200):
        hosts = [HostLoad(f"h{i}", rng.choice([1, 2, 4]), used=0) for i in range(rng.randint(1, 6))]
        hosts = [HostLoad(h.id, h.slots, used=rng.randint(0, h.slots)) for h in hosts]
        gang = rng.choice([2, 4, 6, 8])
        nodes = place_gang(hosts, gang)
        if nodes is None:
            continue
        free = {h.id: h.free for h in hosts}
        assert sum(n.slots for n in nodes) == gang
        assert len({n.host for n in nodes}) == len(nodes) <= MAX_NODES
        assert all(n.slots <= free[n.host] for n in nodes)
        assert len({n.slots for n in nodes}) == 1, "equal shares"


def test_fits_together_says_whether_the_hosts_could_ever_take_the_gang() -> None:
    assert fits_together([HostLoad("a", 2, used=2), HostLoad("b", 2, used=2)], 4), "once they are free"
    assert not fits_together([HostLoad("a", 2), HostLoad("b", 4)], 8)
    assert fits_together([HostLoad("a", 8)], 8)


def test_node_tasks_map_every_slot_and_rank_to_one_index() -> None:
    assert node_ranks(1) == [] and node_ranks(4) == [1, 2, 3] and len(node_ranks(64)) == MAX_NODES - 1
    indexes = [node_map_index(slot, rank, 4) for slot in range(3) for rank in node_ranks(4)]
    assert indexes == list(range(9)), "Airflow's order: the last expand argument varies fastest"
