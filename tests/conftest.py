"""Suite-wide rules: in CI (``CI=true``) a skipped test fails the run unless its reason is one the
suite expects on a machine without that hardware or cluster; a test that imports Determined's
names in-process (``import determined``, from det-airflow's alias folder, as user code does) does
not leave them imported for the tests after it; and under pytest-xdist (``make test`` runs
``pytest -n 2``) the tests that start a real Airflow run in order on one worker, but for a late lane
that the unit tests' worker runs after them."""

from __future__ import annotations

import contextlib
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
# trials, and two Airflow lanes busy at once on a small machine each run about 1.7 times slower (so
# the suite is no faster) and make each other miss their timeouts. The other worker takes the unit
# tests, module by module (a module is a unit: its module-scoped fixtures are made once), the
# slowest first, then a short late lane of Airflow tests that start Airflows of their own (the
# Docker trials of tests/e2e, the README tour): the unit tests end well before the main lane, and
# the late lane fills that time. The main lane is handed out first (`make test` runs pytest -n 2,
# the collection order kept: --no-loadscope-reorder).
AIRFLOW_UNIT = "airflow"
LATE_AIRFLOW_UNIT = "airflow-late"
_STARTS_AIRFLOW = ("tests/integration/", "tests/ui/", "tests/e2e/")
_LATE_AIRFLOW = ("tests/e2e/", "tests/integration/test_readme_tour.py")
# Unit-test modules of a minute or more on 2 cores, handed out before the others so that none of
# them is the last to start.
_SLOW_UNIT_MODULES = (
    "tests/unit/launchers/test_eight_ranks.py",
    "tests/unit/master/test_authz.py",
    "tests/unit/cli/test_task_verbs.py",
    "tests/unit/compat/test_tutorials.py",
    "tests/unit/test_wheel.py",
    "tests/unit/examples/test_mnist_pytorch.py",
    "tests/unit/pytorch/test_deepspeed.py",
    "tests/unit/keras/test_run_trial.py",
    "tests/unit/core/test_through_master_checkpoints.py",
    "tests/unit/cli/test_real_master.py",
    "tests/unit/test_provider.py",
)
_LANES = (AIRFLOW_UNIT, LATE_AIRFLOW_UNIT)


def work_unit(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to, for :func:`pytest_xdist_make_scheduler`."""
    path = nodeid.partition("::")[0]
    if path.startswith(_LATE_AIRFLOW):
        return LATE_AIRFLOW_UNIT
    return AIRFLOW_UNIT if path.startswith(_STARTS_AIRFLOW) else path


def _hand_out_order(nodeid: str) -> tuple[int, int]:
    unit = work_unit(nodeid)
    if unit == AIRFLOW_UNIT:
        return (0, 0)
    if unit == LATE_AIRFLOW_UNIT:
        return (3, 0)
    if unit in _SLOW_UNIT_MODULES:
        return (1, _SLOW_UNIT_MODULES.index(unit))
    return (2, 0)


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


# The niceness of a worker while it runs unit tests beside an Airflow lane: the Airflow tests wait
# on heartbeats and timeouts, the unit tests on nothing but the CPU, so the CPU goes to the first.
# At niceness 10 a unit test of eight worker processes still took half the CPU from an Airflow's
# busy process, and made its requests time out.
UNIT_TESTS_NICENESS = 15


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not hasattr(item.config, "workerinput"):
        return
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if work_unit(item.nodeid) not in _LANES:
        if now < UNIT_TESTS_NICENESS:
            os.setpriority(os.PRIO_PROCESS, 0, UNIT_TESTS_NICENESS)  # its children inherit it
    elif now > 0:
        # The late lane, after this worker's unit tests: its Airflow must not start at their
        # niceness. Only root may lower it again; elsewhere the lane runs as it is.
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, 0)


# The last test of each server group, in the order they run; see pytest_runtest_teardown.
_last_of_group: dict[str, str] = {}
# The last test of each Airflow lane, in the order they run.
_last_of_lane: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # units are handed out in the order the workers collected
        items.sort(key=lambda item: _hand_out_order(item.nodeid))  # stable: a unit keeps its order
    _last_of_group.clear()
    _last_of_lane.clear()
    for item in items:
        if (group := server_group(item.nodeid)) is not None:
            _last_of_group[group] = item.nodeid
        if (unit := work_unit(item.nodeid)) in _LANES:
            _last_of_lane[unit] = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of tests/ui, tests/e2e or the SQLite group, stop the Airflow only they use
    (a session fixture), and after the last test of a lane every Airflow it started, rather than at
    the session's end: an idle Airflow still parses and
    heartbeats, and the rest of the suite would share the CPU with it. Stopping is idempotent; the
    fixture's own teardown removes its folder later."""
    from det_airflow.localairflow import LocalAirflow

    group = server_group(item.nodeid)
    if group is not None and _last_of_group.get(group) == item.nodeid:
        for name in ("airflow", "airflow_sqlite"):
            server = getattr(item, "funcargs", {}).get(name)
            if isinstance(server, LocalAirflow):
                server.stop()
    if _last_of_lane.get(work_unit(item.nodeid)) == item.nodeid:
        # The lane's worker goes on with unit tests: the Airflows its lane left running (the
        # shared one on PostgreSQL above all) stop now rather than at the session's end.
        from tests.integration import conftest as integration

        for server in integration.started_airflows:
            server.stop()
