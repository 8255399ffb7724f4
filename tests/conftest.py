"""Suite-wide rules: in CI (``CI=true``) a skipped test fails the run unless its reason is one the
suite expects on a machine without that hardware or cluster; and a test that imports Determined's
names in-process (``import determined``, from det-airflow's alias folder, as user code does) does
not leave them imported for the tests after it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

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


def pytest_terminal_summary(terminalreporter: Any) -> None:
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
