"""`det agent enable|disable [--drain]` and `det slot enable|disable` against the master's own routes
(the people app on SQLite, served on loopback): what an admin sees switched, what `det agent list`
and `det slot list` then show, and what anyone else is told."""

from __future__ import annotations

from typing import Any

from det_airflow.master import hosts
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people
from tests.unit.master.test_disabled_hosts import asked_to_stop, start
from tests.unit.master.test_queue import experiment, set_pool_slots

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


def _hosts(cluster: Cluster, **slots: int) -> None:
    with cluster.people.db.begin() as conn:
        for host_id, count in slots.items():
            inventory = {"slot_type": "cpu", "slots": count, "devices": [], "queue": f"det-host-{host_id}"}
            hosts.report(conn, host_id, {**inventory, "address": None})


def _column(text: str, name: str) -> dict[str, str]:
    header, rows = _table(text)
    return {
        row[0] + ("/" + row[1] if header[1] == "Slot ID" else ""): row[header.index(name)] for row in rows
    }


def test_an_admin_disables_and_enables_an_agent(det: Any, cluster: Cluster) -> None:
    _hosts(cluster, w1=2, w2=1)
    cluster.login("admin")
    disabled = det("agent", "disable", "w1")
    assert (disabled.code, disabled.out, disabled.err) == (0, "", "Disabled agent w1.\n")
    listed = det("agent", "list").out
    assert _column(listed, "Enabled") == {"w1": "False", "w2": "True"}
    assert _column(listed, "Draining") == {"w1": "False", "w2": "False"}
    assert _column(det("slot", "list").out, "Enabled") == {"w1/0": "False", "w1/1": "False", "w2/0": "True"}
    enabled = det("a", "enable", "w1")
    assert (enabled.code, enabled.err) == (0, "Enabled agent w1.\n")
    assert _column(det("agent", "list").out, "Enabled") == {"w1": "True", "w2": "True"}


def test_all_agents_at_once(det: Any, cluster: Cluster) -> None:
    _hosts(cluster, w1=1, w2=1)
    cluster.login("admin")
    result = det("agent", "disable", "--all")
    assert (result.code, result.err) == (0, "Disabled agent w1.\nDisabled agent w2.\n")
    assert set(_column(det("agent", "list").out, "Enabled").values()) == {"False"}


def test_drain_lists_what_still_runs_there(det: Any, cluster: Cluster, creator: Any) -> None:
    set_pool_slots(64)
    _hosts(cluster, w1=2, w2=2)
    e = experiment(cluster.people)
    trial_id = start(cluster.people, e, 0, "w1")
    cluster.login("admin")
    result = det("agent", "disable", "--drain", "w1")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "Tasks still in progress on draining nodes."
    header, rows = _table("\n".join(lines[1:]))
    assert header == ["Allocation ID", "Name", "Slots Needed", "Agent"]
    assert rows == [[str(trial_id), f"Trial {trial_id} (Experiment {e})", "1", "w1"]]
    assert not asked_to_stop(cluster.people, trial_id), "--drain lets it finish"
    assert _column(det("agent", "list").out, "Draining") == {"w1": "True", "w2": "False"}
    idle = det("agent", "disable", "--drain", "w2")
    assert idle.out == "No tasks in progress on draining nodes.\n" + idle.out.split("\n", 1)[1]
    # Without --drain, what runs there is asked to stop (preempted: it resumes elsewhere).
    assert det("agent", "disable", "w1").code == 0
    assert asked_to_stop(cluster.people, trial_id)


def test_an_admin_disables_and_enables_a_slot(det: Any, cluster: Cluster) -> None:
    _hosts(cluster, w1=2)
    cluster.login("admin")
    disabled = det("slot", "disable", "w1", "1")
    assert (disabled.code, disabled.out) == (0, "Disabled slot 1 of agent w1\n")
    assert _column(det("slot", "list").out, "Enabled") == {"w1/0": "True", "w1/1": "False"}
    assert _column(det("agent", "list").out, "Enabled") == {"w1": "True"}
    enabled = det("s", "enable", "w1", "1")
    assert (enabled.code, enabled.out) == (0, "Enabled slot 1 of agent w1\n")
    assert _column(det("slot", "list").out, "Enabled") == {"w1/0": "True", "w1/1": "True"}


def test_bad_input_gets_one_clear_line(det: Any, cluster: Cluster) -> None:
    _hosts(cluster, w1=2)
    cluster.login("alice")
    refused = det("agent", "disable", "w1")
    assert refused.code == 1
    assert (
        refused.err == "Error: permission denied: user 'alice' may not disable agent 'w1': only admins may\n"
    )
    refused = det("slot", "disable", "w1", "0")
    assert refused.code == 1
    assert "user 'alice' may not disable slot 0 of agent 'w1': only admins may" in refused.err
    assert _column(det("agent", "list").out, "Enabled") == {"w1": "True"}, "nothing was changed"
    cluster.login("admin")
    unknown = det("agent", "enable", "w9")
    assert unknown.code == 1
    assert unknown.err.count("\n") == 1 and "agent 'w9' not found (the master's agents: w1)" in unknown.err
    no_slot = det("slot", "disable", "w1", "5")
    assert no_slot.code == 1
    assert no_slot.err.count("\n") == 1 and "agent 'w1' has no slot 5 (its slots: 0 to 1)" in no_slot.err
    neither = det("agent", "disable")
    assert neither.code == 1
    assert neither.err == (
        "Error: Please pass agent id or --all option. See `det agent disable --help` for details.\n"
    )
    both = det("agent", "enable", "w1", "--all")
    assert both.code == 2 and "not allowed with argument" in both.err
    not_a_number = det("slot", "enable", "w1", "first")
    assert not_a_number.code == 2 and "invalid int value: 'first'" in not_a_number.err
