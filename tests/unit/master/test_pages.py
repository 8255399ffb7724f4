"""The web UI's pages (det_airflow.webui): served from the built bundle, to logged-in users only."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse
from fastapi.testclient import TestClient

from det_airflow.webui import pages
from tests.unit.master.people_app import People

INDEX = "<!doctype html><script type=module src=./assets/index-3f2a.js></script>"


def with_pages(people: People, static: Path) -> TestClient:
    people.client.app.include_router(pages.router(static))  # type: ignore[attr-defined]
    return people.client


def get(client: TestClient, path: str, user: str | None = "viewer") -> httpx.Response:
    return client.get(path, headers={"X-Test-User": user} if user else {}, follow_redirects=False)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    static = tmp_path / "static"
    (static / "assets").mkdir(parents=True)
    (static / "index.html").write_text(INDEX)
    (static / "assets" / "index-3f2a.js").write_text("console.log('det')")
    (static / "favicon.svg").write_text("<svg/>")
    (tmp_path / "secret.txt").write_text("not for the web")
    (static / "assets" / "link.txt").symlink_to(tmp_path / "secret.txt")
    return static


def test_the_index_and_assets_are_served_to_a_logged_in_user(people: People, bundle: Path) -> None:
    client = with_pages(people, bundle)
    index = get(client, "/ui/")
    assert index.status_code == 200
    assert index.text == INDEX
    assert index.headers["content-type"].startswith("text/html")
    assert index.headers["cache-control"] == "no-cache"
    script = get(client, "/ui/assets/index-3f2a.js")
    assert script.text == "console.log('det')"
    assert "javascript" in script.headers["content-type"]
    assert "immutable" in script.headers["cache-control"]
    assert get(client, "/ui/favicon.svg").headers["cache-control"] == "no-cache"
    redirect = get(client, "/ui")
    assert (redirect.status_code, redirect.headers["location"]) == (307, "ui/")


@pytest.mark.parametrize(
    "path", ["/ui/", "/ui/assets/index-3f2a.js", "/ui/favicon.svg", "/ui/missing.js", "/ui"]
)
def test_nothing_is_served_to_anonymous_requests(people: People, bundle: Path, path: str) -> None:
    answer = get(with_pages(people, bundle), path, user=None)
    assert answer.status_code == 401
    assert answer.json() == {"detail": "Not authenticated"}


@pytest.mark.parametrize(
    "path", ["/ui/%2e%2e/secret.txt", "/ui/assets/..%2F..%2Fsecret.txt", "/ui/assets/link.txt", "/ui/nope.js"]
)
def test_paths_outside_the_bundle_are_not_found(people: People, bundle: Path, path: str) -> None:
    answer = get(with_pages(people, bundle), path)
    assert answer.status_code == 404
    assert "not for the web" not in answer.text
    assert "the det web UI has no file" in answer.json()["detail"]


def test_an_unbuilt_ui_says_how_to_build_it(people: People, tmp_path: Path) -> None:
    client = with_pages(people, tmp_path / "never-built")
    for path in ("/ui/", "/ui/assets/index.js"):
        answer = get(client, path)
        assert answer.status_code == 503
        assert answer.json() == {"detail": "the det web UI was not built: run `make ui`"}


def test_the_plugin_links_its_pages_into_airflows_navigation_dags_and_task_instances() -> None:
    from det_airflow.webui.plugin import DetPlugin

    views = {v["name"]: ExternalViewResponse.model_validate(v) for v in DetPlugin.external_views}
    assert {name: (v.destination, v.href) for name, v in views.items()} == {
        "Experiments": ("nav", "det/ui/#/experiments"),
        "Job queue": ("nav", "det/ui/#/queue"),
        "Tasks": ("nav", "det/ui/#/tasks"),
        "Models": ("nav", "det/ui/#/models"),
        "Workspaces": ("nav", "det/ui/#/workspaces"),
        "Webhooks": ("nav", "det/ui/#/webhooks"),
        "Experiment": ("dag", "det/ui/?in=tab#/dag/{DAG_ID}"),
        "Trial": ("task_instance", "det/ui/?in=tab#/dag/{DAG_ID}/run/{RUN_ID}/map/{MAP_INDEX}"),
    }
    assert len({v.url_route for v in views.values()}) == 8
    (app,) = DetPlugin.fastapi_apps
    assert app["url_prefix"] == "/det"
    assert any(getattr(r, "path", None) == "/ui/" for r in app["app"].routes)


@pytest.mark.parametrize(
    "raw_path, shown",
    [
        ("/ui/index.html%00.js", "index.html\\x00.js"),
        ("/ui/assets/%00", "assets/\\x00"),
        ("/ui/..%2fsecret.txt", "../secret.txt"),
        ("/ui/assets/..%2F..%2Fsecret.txt", "assets/../../secret.txt"),
        ("/ui/%2e%2e/secret.txt", "../secret.txt"),
        ("/ui/assets%5c..%5c..%5csecret.txt", "assets\\\\..\\\\..\\\\secret.txt"),
        ("/ui/assets//index-3f2a.js", "assets//index-3f2a.js"),
    ],
)
def test_bad_paths_are_not_found_never_a_server_error(
    people: People, bundle: Path, raw_path: str, shown: str
) -> None:
    answer = get(with_pages(people, bundle), raw_path)
    assert answer.status_code == 404
    assert answer.json()["detail"] == f"the det web UI has no file '{shown}'"
