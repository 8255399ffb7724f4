"""The local Airflow runs real DAGs, on PostgreSQL and on SQLite, and listens on loopback only."""

from __future__ import annotations

import ipaddress
import re
import secrets
import subprocess
import time

import pytest

from det_airflow.localairflow import LocalAirflow

pytestmark = pytest.mark.integration

# Two tasks, one XCom between them: the task processes reach the API server's execution API.
DAG_SOURCE = """
from airflow.sdk import dag, task


@dag(dag_id="{dag_id}", schedule=None)
def pipeline():
    @task
    def produce():
        return {{"answer": 21}}

    @task
    def consume(value):
        assert value == {{"answer": 21}}, value
        return value["answer"] * 2

    consume(produce())


pipeline()
"""

#: Ports Airflow opens: its log servers when not skipped, the scheduler's health check server.
LOG_AND_HEALTH_PORTS = {8793, 8794, 8974}


def write_dag(af: LocalAirflow) -> str:
    dag_id = f"xcom_pair_{secrets.token_hex(4)}"  # unique: an existing database may hold older runs
    (af.dags_folder / f"{dag_id}.py").write_text(DAG_SOURCE.format(dag_id=dag_id))
    return dag_id


def run_dag_to_success(af: LocalAirflow, api) -> None:  # api: conftest's AirflowAPI
    dag_id = write_dag(af)
    dag = api.wait_for_dag(dag_id)
    assert dag["is_paused"] is False
    run = api.wait_for_run(dag_id, api.trigger(dag_id))
    assert run["state"] == "success", run["tis"]
    assert run["tis"] == {"produce": "success", "consume": "success"}
    xcom = api.http.get(
        f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/consume/xcomEntries/return_value"
    )
    assert xcom.json()["value"] == 42


def test_dag_runs_on_postgres(airflow: LocalAirflow, airflow_api) -> None:
    run_dag_to_success(airflow, airflow_api)
    assert airflow_api.import_errors() == []


def test_dag_runs_on_sqlite(airflow_sqlite: LocalAirflow, airflow_sqlite_api) -> None:
    run_dag_to_success(airflow_sqlite, airflow_sqlite_api)


def test_broken_dag_file_shows_as_import_error(airflow: LocalAirflow, airflow_api) -> None:
    (airflow.dags_folder / "broken_dag.py").write_text(
        "from airflow.sdk import dag\nraise ValueError('nope')\n"
    )
    try:
        for _ in range(120):
            errors = [e for e in airflow_api.import_errors() if e["filename"].endswith("broken_dag.py")]
            if errors:
                break
            time.sleep(0.5)
        assert errors and "ValueError: nope" in errors[0]["stack_trace"]
    finally:
        (airflow.dags_folder / "broken_dag.py").unlink()


def listening_sockets() -> list[tuple[str, int, set[int]]]:
    """``(address, port, pids)`` of every listening TCP socket, from ``ss -ltnpH``."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    sockets = []
    for line in out.splitlines():
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        sockets.append((address.strip("[]").split("%")[0], int(port), pids))
    return sockets


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # "*" and the like: every interface
        return False


@pytest.mark.parametrize("which", ["airflow", "airflow_sqlite"])
def test_listens_on_loopback_only(which: str, request: pytest.FixtureRequest) -> None:
    af: LocalAirflow = request.getfixturevalue(which)
    ours = set(af.processes())
    sockets = listening_sockets()
    mine = [(addr, port) for addr, port, pids in sockets if pids & ours]
    assert ("127.0.0.1", af.port) in mine, f"the API server should listen on 127.0.0.1:{af.port}: {sockets}"
    assert [s for s in mine if not is_loopback(s[0])] == [], "Airflow listens beyond loopback"
    assert [s for s in mine if s[1] in LOG_AND_HEALTH_PORTS] == [], "log or health servers were started"
