"""Fixtures that start the real thing: a PostgreSQL server and an Airflow on it (or on SQLite).

Both live for the whole session and are stopped at its end. ``DET_TEST_PG_URL`` points the tests
at an existing PostgreSQL instead of a throwaway one (``postgresql://user:pw@host:port/db``).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from det_airflow._pgcluster import PgCluster, find_bindir
from det_airflow.localairflow import LocalAirflow, service_port, sqlite_url, write_config

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
_HERE = Path(__file__).parent
_timings: list[str] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failed test, attach the tails of the Airflow components' logs to the report."""
    report = yield
    if report.failed:
        for name in ("airflow", "airflow_sqlite"):
            af = getattr(item, "funcargs", {}).get(name)
            if isinstance(af, LocalAirflow):
                report.sections.append((f"{name} component logs ({af.home / 'logs'})", af.log_tails()))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A pytest-xdist worker hands its start-up times to the controller (tests/conftest.py prints them).
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["airflow_timings"] = list(_timings)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _timings:
        terminalreporter.write_sep("-", "local Airflow start-up")
        for line in _timings:
            terminalreporter.write_line(line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- PostgreSQL ------------------------------------------------------------------------------------


def _pg_bindir() -> Path:
    """The PostgreSQL server binaries the tests' throwaway cluster runs."""
    if bindir := find_bindir():
        return bindir
    pytest.fail(
        "PostgreSQL server binaries not found: apt-get install postgresql, "
        "or set DET_TEST_PG_URL to an existing server"
    )


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a PostgreSQL database for Airflow (``postgresql://...``): ``DET_TEST_PG_URL`` or a throwaway server."""
    if url := os.environ.get("DET_TEST_PG_URL"):
        yield url
        return
    t0 = time.monotonic()
    # Outside the ephemeral range, as a real deployment's database: trials may not reach it.
    cluster = PgCluster.start_throwaway(_pg_bindir(), service_port())
    _timings.append(f"postgres: initdb + start + createdb {time.monotonic() - t0:.1f} s")
    _clusters.append(cluster)
    try:
        yield cluster.url
    finally:
        _clusters.remove(cluster)
        cluster.stop()


_clusters: list[PgCluster] = []


@pytest.fixture
def restart_postgres(postgres_url: str) -> Callable[[], None]:
    """Restarts the tests' own PostgreSQL server (the one behind ``postgres_url``)."""
    if not _clusters:
        pytest.skip("needs a PostgreSQL server started by the tests, not DET_TEST_PG_URL's")
    return _clusters[0].restart


# -- Airflow ---------------------------------------------------------------------------------------


#: The Airflows :func:`_run_airflow` started in this process, which tests/conftest.py stops when
#: the lane of tests that uses them is done (stopping is idempotent).
started_airflows: list[LocalAirflow] = []


def _run_airflow(
    base: Path, sql_alchemy_conn: str, label: str, extra: dict[str, dict[str, str]]
) -> Iterator[LocalAirflow]:
    t0 = time.monotonic()
    af = write_config(
        base / "home",
        sql_alchemy_conn=sql_alchemy_conn,
        dags_folder=base / "dags",
        port=free_port(),
        extra=extra,
    )
    started_airflows.append(af)
    try:
        af.migrate()
        t1 = time.monotonic()
        af.start()
        af.wait_ready(timeout=300)
    except Exception as e:
        af.stop()
        pytest.fail(f"the {label} Airflow did not start: {e}\n\n{af.log_tails()}", pytrace=False)
    t2 = time.monotonic()
    _timings.append(
        f"airflow ({label}): migrate {t1 - t0:.1f} s, start until healthy {t2 - t1:.1f} s, total {t2 - t0:.1f} s"
    )
    try:
        yield af
    finally:
        af.stop()


#: Users of the test Airflows' simple auth manager, ``name: role``; Airflow writes the passwords
#: of all but the admin into the passwords file (``home / PASSWORDS_FILE``) when its API server starts.
TEST_USERS = {"admin": "admin", "viewer": "viewer", "alice": "user", "bob": "user"}


@pytest.fixture(scope="session")
def airflow_config_extra() -> dict[str, dict[str, str]]:
    """Sections added to the test Airflows' ``airflow.cfg`` (e.g. ``[det]``); override to change."""
    return default_config_extra()


def default_config_extra() -> dict[str, dict[str, str]]:
    """What :func:`airflow_config_extra` gives, for overrides that add to it."""
    users = ",".join(f"{name}:{role}" for name, role in TEST_USERS.items())
    # Only the pools of test_preemption.py preempt or share fairly; every other test keeps the defaults.
    det = {
        "preemption_pools": "det_preemption_gang,det_preemption_ignored,det_fair_share",
        "fair_share_pools": "det_fair_share",
        # The webhook receivers of test_webhooks_airflow.py and tests/ui listen on loopback.
        "webhook_allowed_hosts": "127.0.0.1",
    }
    return {"core": {"simple_auth_manager_users": users}, "det": det}


def _postgres_driver(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg2://{rest}" if scheme in ("postgres", "postgresql") else url


@pytest.fixture(scope="session")
def airflow(
    postgres_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    airflow_config_extra: dict[str, dict[str, str]],
) -> Iterator[LocalAirflow]:
    """A running Airflow (scheduler, DAG processor, triggerer, API server) on PostgreSQL.

    Its DAGs folder (``airflow.dags_folder``) is an empty temporary folder the tests write to.
    """
    base = _airflow_base("airflow-pg")
    try:
        yield from _run_airflow(base, _postgres_driver(postgres_url), "postgres", airflow_config_extra)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_sqlite(
    tmp_path_factory: pytest.TempPathFactory, airflow_config_extra: dict[str, dict[str, str]]
) -> Iterator[LocalAirflow]:
    """A running Airflow on SQLite, as ``make quickstart`` sets it up."""
    base = _airflow_base("airflow-sqlite")
    try:
        yield from _run_airflow(base, sqlite_url(base / "home"), "sqlite", airflow_config_extra)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _airflow_base(name: str) -> Path:
    """A folder for an Airflow home outside pytest's temporary root, which pytest keeps private to
    its user (0700) at every session start: trials run as another user and must pass through to
    their work folders and checkpoints in the home."""
    return Path(tempfile.mkdtemp(prefix=f"det-{name}-"))


# -- REST API helpers ------------------------------------------------------------------------------


class AirflowAPI:
    """The few calls of Airflow's REST API (``/api/v2``) the tests make, logged in as the admin."""

    def __init__(self, af: LocalAirflow) -> None:
        self.af = af
        self.http = af.client()

    def close(self) -> None:
        self.http.close()

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the DAG processor has parsed ``dag_id``; return the DAG. Fails with the import errors."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.http.get(f"/api/v2/dags/{dag_id}")
            if r.status_code == 200:
                return dict(r.json())
            if r.status_code != 404:
                r.raise_for_status()
            if time.monotonic() > deadline:
                pytest.fail(
                    f"DAG {dag_id} did not appear within {timeout:.0f} s; import errors: {self.import_errors()}"
                )
            time.sleep(0.5)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Start a run of ``dag_id`` now; return its run id."""
        r = self.http.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        assert r.status_code in (200, 201), r.text
        return str(r.json()["dag_run_id"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0) -> dict[str, Any]:
        """Wait until the run is ``success`` or ``failed``; return it, with its task instances under ``"tis"``."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.http.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").raise_for_status().json()
            if run["state"] in TERMINAL_RUN_STATES:
                run["tis"] = self.task_instances(dag_id, run_id)
                return dict(run)
            if time.monotonic() > deadline:
                pytest.fail(
                    f"run {run_id} of {dag_id} still {run['state']} after {timeout:.0f} s; "
                    f"tasks: {self.task_instances(dag_id, run_id)}"
                )
            time.sleep(0.5)

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """``{task_id (or task_id[map_index]): state}`` of a run."""
        r = self.http.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances").raise_for_status()
        return {
            ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else ""): ti["state"]
            for ti in r.json()["task_instances"]
        }

    def import_errors(self) -> list[dict[str, Any]]:
        """The DAG files that failed to import: ``[{"filename", "stack_trace", ...}]``."""
        r = self.http.get("/api/v2/importErrors").raise_for_status()
        return list(r.json()["import_errors"])


@pytest.fixture
def airflow_api(airflow: LocalAirflow) -> Iterator[AirflowAPI]:
    """REST helpers on the PostgreSQL Airflow."""
    api = AirflowAPI(airflow)
    yield api
    api.close()


@pytest.fixture
def airflow_sqlite_api(airflow_sqlite: LocalAirflow) -> Iterator[AirflowAPI]:
    """REST helpers on the SQLite Airflow."""
    api = AirflowAPI(airflow_sqlite)
    yield api
    api.close()


@pytest.fixture
def release_dir() -> Iterator[Path]:
    """A folder where a test drops files that its held trials wait for."""
    # Trials may run as another user: the folder they poll must be readable by everyone.
    with tempfile.TemporaryDirectory(prefix="det-release-") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)
