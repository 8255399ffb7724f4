"""Suite-wide rules: in CI (``CI=true``) a skipped test fails the run unless its reason is one the
suite expects on a machine without that hardware or cluster; a test that imports Determined's
names in-process (``import determined``, from det-airflow's alias folder, as user code does) does
not leave them imported for the tests after it; and under pytest-xdist (``make test`` runs
``pytest -n 2``) the tests that start a real Airflow run in order on one worker."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TESTS = Path(__file__).parent

# Skips that are expected where the thing tested cannot exist (the reason must start with one of these).
EXPECTED_SKIP_REASONS = (
    "needs a Kubernetes cluster",
    "needs a GPU",
)

_unexpected: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _path, _line, reason = report.longrepr if isinstance(report.longrepr, tuple) else ("", 0, "")
        reason = str(reason).removeprefix("Skipped: ")
        if not reason.startswith(EXPECTED_SKIP_REASONS):
            _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    if _unexpected and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# What the workers of pytest-xdist report back: tests/integration's Airflow start-up times.
_worker_timings: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    lines = getattr(node, "workeroutput", {}).get("airflow_timings", [])
    _worker_timings.extend(f"[{node.gateway.id}] {line}" for line in lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _worker_timings:
        terminalreporter.write_sep("-", "local Airflow start-up")
        for line in _worker_timings:
            terminalreporter.write_line(line)
    if _unexpected:
        strict = os.environ.get("CI", "").lower() in ("1", "true", "yes")
        terminalreporter.write_sep("-", "unexpected skips" + (" (fail the run in CI)" if strict else ""))
        for line in _unexpected:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _forget_determined() -> Iterator[None]:
    before = "determined" in sys.modules
    yield
    if not before:
        for name in [n for n in sys.modules if n == "determined" or n.startswith("determined.")]:
            del sys.modules[name]


# -- pytest-xdist: which worker runs what -------------------------------------------------------------
#
# Everything that starts a real Airflow (tests/integration, tests/ui, tests/e2e) is one unit of work,
# run in order on one worker, as it would run alone: its tests wait on schedulers, heartbeats and
# trials, and two Airflows busy at once on a small machine make each other miss their timeouts. The
# other worker takes the unit tests, module by module (a module is a unit: its module-scoped
# fixtures are made once). The Airflow unit is handed out first.
AIRFLOW_UNIT = "airflow"
_STARTS_AIRFLOW = ("tests/integration", "tests/ui", "tests/e2e")


def work_unit(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to, for :func:`pytest_xdist_make_scheduler`."""
    path = nodeid.partition("::")[0]
    return AIRFLOW_UNIT if path.startswith(tuple(f"{top}/" for top in _STARTS_AIRFLOW)) else path


def server_group(nodeid: str) -> str | None:
    """The tests that share an Airflow no other test uses: tests/ui's, tests/e2e's (their conftests'
    own), and the integration tests on the SQLite Airflow (their names or parameters say so)."""
    path, _, name = nodeid.partition("::")
    top = "/".join(path.split("/")[:2])
    if top in ("tests/ui", "tests/e2e"):
        return top
    if top == "tests/integration" and "sqlite" in name:
        return "integration-sqlite"
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


# The niceness of a worker that runs unit tests beside the Airflow tests: the Airflow tests wait on
# heartbeats and timeouts, the unit tests on nothing but the CPU, so the CPU goes to the first.
UNIT_TESTS_NICENESS = 10


def pytest_runtest_setup(item: pytest.Item) -> None:
    if hasattr(item.config, "workerinput") and work_unit(item.nodeid) != AIRFLOW_UNIT:
        now = os.getpriority(os.PRIO_PROCESS, 0)
        if now < UNIT_TESTS_NICENESS:
            os.setpriority(os.PRIO_PROCESS, 0, UNIT_TESTS_NICENESS)  # its children inherit it


# The last test of each server group, in the order they run; see pytest_runtest_teardown.
_last_of_group: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # units are handed out in the order the workers collected
        items.sort(key=lambda item: work_unit(item.nodeid) != AIRFLOW_UNIT)
    _last_of_group.clear()
    for item in items:
        if (group := server_group(item.nodeid)) is not None:
            _last_of_group[group] = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of tests/ui, tests/e2e or the SQLite group, stop the Airflow only they use
    (a session fixture) rather than at the session's end: an idle Airflow still parses and
    heartbeats, and the rest of the suite would share the CPU with it. Stopping is idempotent; the
    fixture's own teardown removes its folder later."""
    from det_airflow.localairflow import LocalAirflow

    group = server_group(item.nodeid)
    if group is None or _last_of_group.get(group) != item.nodeid:
        return
    for name in ("airflow", "airflow_sqlite"):
        server = getattr(item, "funcargs", {}).get(name)
        if isinstance(server, LocalAirflow):
            server.stop()
