"""Fixtures of the browser tests: the real Airflow and PostgreSQL of tests/integration, det set up
on it, and Debian's chromium driven by Playwright, logged in through Airflow's own login page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from det_airflow.localairflow import LocalAirflow
from tests.integration import conftest as integration
from tests.integration.det_env import REPO, DetEnv

# The PostgreSQL and Airflow of tests/integration.
postgres_url = integration.postgres_url
airflow_config_extra = integration.airflow_config_extra
airflow = integration.airflow
_FAILED = pytest.StashKey[bool]()
_BROWSER_EVENTS = pytest.StashKey[list[str]]()

#: The system browser: the tests never download one (``playwright install`` is not run).
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / "test-results" / "ui"
#: How long a page may take to show what the test waits for (Playwright's expect() polls until then).
EXPECT_TIMEOUT_MS = 60_000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, note it for the page fixture's screenshot and attach the Airflow logs' tails."""
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
        events = item.stash.get(_BROWSER_EVENTS, [])
        if events:
            report.sections.append(("what the browser reported", "\n".join(events)))
        af = getattr(item, "funcargs", {}).get("airflow")
        if isinstance(af, LocalAirflow):
            report.sections.append((f"airflow component logs ({af.home / 'logs'})", af.log_tails()))
    return report


@pytest.fixture(scope="module")
def det(airflow: LocalAirflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


# Module scope: Playwright's sync API keeps an event loop running in this thread until it stops,
# and the tests collected after these (asyncio.run() in unit tests) need none running.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: apt-get install chromium", pytrace=False)
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield browser
        browser.close()


def log_in(context: BrowserContext, af: LocalAirflow, user: str, password: str) -> None:
    """Sign in on Airflow's login page, as a person does; Airflow's page sets the ``_token`` cookie."""
    page = context.new_page()
    page.goto(f"{af.url}/")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("nav-sidebar")).to_be_visible()
    assert any(c["name"] == "_token" for c in context.cookies()), "no _token cookie after signing in"
    page.close()


@pytest.fixture(scope="module")
def admin_context(browser: Browser, airflow: LocalAirflow) -> Iterator[BrowserContext]:
    """A browser profile signed in to Airflow as the admin."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    log_in(context, airflow, airflow.admin_user, airflow.admin_password)
    yield context
    context.close()


@pytest.fixture
def page(admin_context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A tab of the admin's browser; on a failure, what it showed is saved as FAILED-<test>.png and
    what it reported (console errors, uncaught exceptions, failed or refused requests, a crash)
    goes into the failure's report."""
    page = admin_context.new_page()
    events: list[str] = []
    request.node.stash[_BROWSER_EVENTS] = events
    page.on("console", lambda m: events.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: events.append(f"uncaught: {e}"))
    page.on("crash", lambda _: events.append("the page crashed"))
    page.on("requestfailed", lambda r: events.append(f"request failed: {r.method} {r.url} {r.failure}"))
    page.on(
        "response",
        lambda r: events.append(f"HTTP {r.status}: {r.request.method} {r.url}") if r.status >= 400 else None,
    )
    yield page
    if request.node.stash.get(_FAILED, False):
        screenshot(page, f"FAILED-{request.node.name}")
    page.close()
    # A page that threw or logged an error failed its user, whatever the test looked at. Refused
    # requests a test makes on purpose log "Failed to load resource"; those are the responses'.
    errors = [
        event
        for event in events
        if event.startswith("uncaught:")
        or (event.startswith("console error:") and "Failed to load resource" not in event)
    ]
    if errors and not request.node.stash.get(_FAILED, False):
        pytest.fail("the page reported errors:\n" + "\n".join(errors), pytrace=False)


def screenshot(page: Page, name: str) -> Path:
    """Save what the page shows now as ``test-results/ui/NAME.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    return path
