"""`det agent list` and `det slot list` against a stand-in master serving ``GET /api/v1/agents``
(answers checked against the `Hosts` model): the tables, CSV and JSON a user sees, `--agent`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Header, HTTPException

from det_airflow.api.models import Hosts

from .conftest import TOKEN, _free_port

GPU_HOST = {
    "id": "gpu-a",
    "registered_time": "2025-03-01T12:00:00+00:00",
    "last_seen": "2025-03-01T12:05:00+00:00",
    "alive": True,
    "slot_type": "cuda",
    "num_slots": 2,
    "used_slots": 1,
    "queue": "det-host-gpu-a",
    "address": "10.0.0.5",
    "slots": [
        {
            "slot_id": 0,
            "device": 0,
            "trial_id": 12,
            "experiment_id": 3,
            "task_name": "Trial 12 (Experiment 3)",
            "enabled": True,
            "draining": False,
        },
        {
            "slot_id": 1,
            "device": 1,
            "trial_id": None,
            "experiment_id": None,
            "task_name": None,
            "enabled": False,
            "draining": False,
        },
    ],
    "enabled": True,
    "draining": False,
}
CPU_HOST = {
    "id": "cpu-b",
    "registered_time": "2025-03-01T11:00:00+00:00",
    "last_seen": "2025-03-01T11:30:00+00:00",
    "alive": False,
    "slot_type": "cpu",
    "num_slots": 1,
    "used_slots": 0,
    "queue": "det-host-cpu-b",
    "address": None,
    "slots": [
        {
            "slot_id": 0,
            "device": None,
            "trial_id": None,
            "experiment_id": None,
            "task_name": None,
            "enabled": False,
            "draining": True,
        }
    ],
    "enabled": False,
    "draining": True,
}


class Inventory:
    """What the stand-in master answers; tests change ``agents``."""

    agents: list[dict[str, Any]] = []


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/det/api/v1/agents", response_model=Hosts)
    def agents(authorization: str | None = Header(None)) -> Any:
        if authorization != f"Bearer {TOKEN}":
            raise HTTPException(401, "missing or invalid token")
        return {"agents": Inventory.agents}

    return app


@pytest.fixture(scope="module")
def _served() -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the stand-in master did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def agents_master(_served: str, cli_env: Any, monkeypatch: pytest.MonkeyPatch) -> type[Inventory]:
    """The stand-in master as $DET_MASTER, logged in, with a GPU host and a dead CPU host."""
    from det_airflow.api.user import store_login

    monkeypatch.setenv("DET_MASTER", _served)
    store_login(_served, "admin", TOKEN)
    monkeypatch.setattr(Inventory, "agents", [GPU_HOST, CPU_HOST])
    return Inventory


def test_agent_list_shows_one_row_per_host(det: Any, agents_master: Any) -> None:
    result = det("agent", "list")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        " Agent ID   | Registered Time          |   Num Slots |   Used Slots | Slot Type   "
        "| Alive   | Enabled   | Draining   | Queue          | Addresses",
        "------------+--------------------------+-------------+--------------+-------------"
        "+---------+-----------+------------+----------------+-------------",
        " gpu-a      | 2025-03-01 12:00:00+0000 |           2 |            1 | cuda        "
        "| True    | True      | False      | det-host-gpu-a | 10.0.0.5",
        " cpu-b      | 2025-03-01 11:00:00+0000 |           1 |            0 | cpu         "
        "| False   | False     | True       | det-host-cpu-b |",
    ]


def test_agent_list_without_worker_hosts_says_where_trials_run(
    det: Any, agents_master: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Inventory, "agents", [])
    result = det("agent", "list")
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].startswith(" Agent ID ")
    assert "No worker hosts report to this master" in result.err
    assert "on the scheduler's machine" in result.err
    assert det("agent", "list", "--csv").err == ""


def test_agent_list_csv_and_json(det: Any, agents_master: Any) -> None:
    assert det("a", "ls", "--csv").out.splitlines() == [
        "Agent ID,Registered Time,Num Slots,Used Slots,Slot Type,Alive,Enabled,Draining,Queue,Addresses",
        "gpu-a,2025-03-01 12:00:00+0000,2,1,cuda,True,True,False,det-host-gpu-a,10.0.0.5",
        "cpu-b,2025-03-01 11:00:00+0000,1,0,cpu,False,False,True,det-host-cpu-b,",
    ]
    assert json.loads(det("a", "list", "--json").out) == [GPU_HOST, CPU_HOST]


def test_slot_list_shows_what_holds_each_slot(det: Any, agents_master: Any) -> None:
    result = det("slot", "list", "--csv")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "Agent ID,Slot ID,Enabled,Draining,Allocation,Task Name,Type,Device",
        "gpu-a,0,True,False,12,Trial 12 (Experiment 3),cuda,0",
        "gpu-a,1,False,False,,,cuda,1",
        "cpu-b,0,False,True,,,cpu,",
    ]


def test_slot_list_of_one_agent(det: Any, agents_master: Any) -> None:
    table = det("s", "ls", "--agent", "cpu-b").out.splitlines()
    assert [cell.strip() for cell in table[0].split("|")] == [
        "Agent ID",
        "Slot ID",
        "Enabled",
        "Draining",
        "Allocation",
        "Task Name",
        "Type",
        "Device",
    ]
    assert [[cell.strip() for cell in line.split("|")] for line in table[2:]] == [
        ["cpu-b", "0", "False", "True", "", "", "cpu", ""]
    ]
    records = json.loads(det("slot", "list", "--agent", "gpu-a", "--json").out)
    assert records[0] == {
        "agent_id": "gpu-a",
        "enabled": True,
        "slot_type": "cuda",
        "slot_id": 0,
        "device": 0,
        "trial_id": 12,
        "experiment_id": 3,
        "task_name": "Trial 12 (Experiment 3)",
        "draining": False,
    }
    assert [r["slot_id"] for r in records] == [0, 1]


def test_slot_list_of_an_unknown_agent_is_one_line_and_exit_1(det: Any, agents_master: Any) -> None:
    result = det("slot", "list", "--agent", "gpu-z")
    assert (result.code, result.out) == (1, "")
    assert result.err.splitlines() == ["Error: --agent: no agent 'gpu-z' (the master's agents: gpu-a, cpu-b)"]


def test_no_hosts_yet(det: Any, agents_master: Any) -> None:
    agents_master.agents = []
    assert det("agent", "list", "--csv").out.splitlines() == [
        "Agent ID,Registered Time,Num Slots,Used Slots,Slot Type,Alive,Enabled,Draining,Queue,Addresses"
    ]
    result = det("slot", "list", "--agent", "gpu-a")
    assert result.code == 1
    assert "no agent 'gpu-a' (the master's agents: none)" in result.err


def test_csv_and_json_exclude_each_other(det: Any) -> None:
    result = det("agent", "list", "--csv", "--json")
    assert result.code == 2
    assert "not allowed with argument" in result.err
