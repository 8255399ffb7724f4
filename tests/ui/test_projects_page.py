"""Workspaces and projects in the det web UI, in a real browser against a real Airflow: an admin
makes a workspace and a project from the pages, writes the project's notes in Markdown, and finds
them rendered again after a reload. Screenshots go to test-results/ui/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from det_airflow.localairflow import LocalAirflow
from tests.integration.det_env import DetEnv
from tests.ui.conftest import screenshot

pytestmark = pytest.mark.integration

NOTES = "# Plan\n\nTry a **bigger** batch.\n\n<script>window.pwned = 1</script>\n"


def test_a_projects_notes_are_saved_and_shown_again_after_a_reload(
    page: Page, airflow: LocalAirflow, det: DetEnv
) -> None:
    page.goto(f"{airflow.url}/det/ui/#/experiments")
    page.get_by_test_id("nav-workspaces").click()
    expect(page.get_by_test_id("workspaces-table")).to_contain_text("Uncategorized")
    page.get_by_test_id("new-workspace-name").fill("ui-research")
    page.get_by_test_id("new-workspace-create").click()
    expect(page.get_by_test_id("workspace-name")).to_have_text("ui-research")

    page.get_by_test_id("new-project-name").fill("vision")
    page.get_by_test_id("new-project-create").click()
    expect(page).to_have_url(re.compile(r"#/projects/\d+$"))
    expect(page.get_by_test_id("project-name")).to_have_text("vision")
    expect(page.get_by_test_id("project-notes")).to_have_text("No notes yet.")

    page.get_by_test_id("project-notes-edit").click()
    page.get_by_test_id("project-notes-editor").fill(NOTES)
    page.get_by_test_id("project-notes-save").click()
    notes = page.get_by_test_id("project-notes")
    expect(notes.get_by_role("heading", name="Plan")).to_be_visible()
    expect(notes.locator("strong")).to_have_text("bigger")

    page.reload()
    expect(notes.get_by_role("heading", name="Plan")).to_be_visible()
    # Raw HTML in the notes is shown as text, never run.
    expect(notes).to_contain_text("<script>window.pwned = 1</script>")
    assert page.evaluate("window.pwned") is None
    project_id = int(page.url.rsplit("/", 1)[1])
    assert det.get(f"/projects/{project_id}")["project"]["notes"] == NOTES
    screenshot(page, "project-notes")
