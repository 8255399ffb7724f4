"""A task's page cannot act as the person who opens it, in a real browser: bob's TensorBoard serves
a page whose script calls the master's API with whatever login the browser holds; alice, who may
read his experiment, opens it from the master's address (as the Tasks page and `det tensorboard
open` link it) and lands on the task's own origin, where the page runs but her Airflow login does
not reach the master's API.

The master's real app is served by uvicorn at /det, as Airflow's API server mounts it, on loopback
(so its tasks are served under ``*.localhost``), with Airflow's simple auth manager reading the real
login cookie; the task's server is a stand-in on loopback, reported as the runner reports one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from det_airflow.master import schema, trials
from det_airflow.tasks import SECRET_HEADER
from tests.ui.conftest import browser, screenshot  # noqa: F401 - the module's browser
from tests.unit.master.people_app import ROLES, SERVICE_TOKEN, People

pytestmark = pytest.mark.integration

SECRET = "bobs-board-secret-0123456789"
SLOT_TASK = {"run_id": "r", "task_id": "trial", "map_index": 0, "try_number": 1}

# Bob's page: it shows itself, then tries the master's API with the visitor's login.
PAGE = """<!doctype html><meta charset=utf-8><title>bob's board</title>
<h1 id=title>Bob's TensorBoard</h1><pre id=out>running</pre>
<script>
(async () => {
  const master = %(master)s;
  const out = {origin: location.origin};
  async function attempt(name, url, init) {
    try {
      const answer = await fetch(url, {credentials: "include", ...init});
      out[name] = answer.status + " " + (await answer.text()).slice(0, 200);
    } catch (error) {
      out[name] = "refused: " + error;
    }
  }
  const webhook = JSON.stringify({
    name: "bob-was-here", url: "http://127.0.0.1:9/hook",
    triggers: [{triggerType: "EXPERIMENT_STATE_CHANGE", condition: {state: "COMPLETED"}}],
  });
  await attempt("me", master + "/det/api/v1/me");
  await attempt("webhook", master + "/det/api/v1/webhooks",
                {method: "POST", headers: {"Content-Type": "application/json"}, body: webhook});
  await attempt("webhook_form", master + "/det/api/v1/webhooks",
                {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: webhook});
  await attempt("me_here", "/det/api/v1/me");
  document.getElementById("out").textContent = JSON.stringify(out);
})();
</script>
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(app: object, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "a server did not start"
        time.sleep(0.05)
    return server, thread


@dataclass
class Site:
    url: str  # the master's address, http://127.0.0.1:<port>
    people: People
    tokens: dict[str, str]  # Airflow's login of each person (the JWT Airflow's login page sets)

    def api(self, user: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/det/api/v1", headers={"Authorization": f"Bearer {self.tokens[user]}"}
        )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The master's app at /det of a real server on loopback, logged in to with real Airflow JWTs."""
    from airflow import settings
    from airflow.api_fastapi.app import create_auth_manager, purge_cached_app
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.models.pool import Pool
    from airflow.models.revoked_token import RevokedToken
    from airflow.models.team import Team
    from fastapi import FastAPI

    from det_airflow.airflow_compat import get_auth_manager
    from det_airflow.master.app import create_app
    from det_airflow.master.auth import SERVICE_TOKEN_SETTING, hash_token
    from det_airflow.master.db import get_database, set_setting
    from tests.unit.master.owners import checkpoint_root

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", "tests.unit.master.people_app.PerDagAuthManager")
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", url)
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "j" * 64)
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_WORK_DIR", str(tmp_path / "det-trials"))
    monkeypatch.setenv("AIRFLOW__DET__WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
    storage = checkpoint_root(tmp_path / "checkpoints")
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(storage))
    get_database.cache_clear()
    db = get_database()
    db.migrate()
    with db.begin() as conn:
        set_setting(conn, SERVICE_TOKEN_SETTING, hash_token(SERVICE_TOKEN))
    create_auth_manager()
    BaseAuthManager._get_token_signer.cache_clear()  # type: ignore[attr-defined]
    BaseAuthManager._get_token_validator.cache_clear()  # type: ignore[attr-defined]
    # Airflow's own tables a task's create and a login read, in the same SQLite file.
    saved = settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC
    settings.configure_vars()
    settings.reconfigure_orm()
    for model in (Team, Pool, DagPriorityParsingRequest, RevokedToken):
        model.__table__.create(settings.engine, checkfirst=True)  # type: ignore[attr-defined]
    with settings.Session() as session:  # type: ignore[misc]
        session.add(Pool(pool="default_pool", slots=8, description="", include_deferred=False))
        session.commit()
    manager = get_auth_manager()
    tokens = {
        name: manager.generate_jwt(SimpleAuthManagerUser(username=name, role=ROLES[name])) for name in ROLES
    }
    root = FastAPI()
    root.mount("/det", create_app(background_jobs=False))
    server, thread = serve(root, port)
    try:
        yield Site(url, People(None, db, storage), tokens)  # type: ignore[arg-type]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        db.engine.dispose()
        get_database.cache_clear()
        purge_cached_app()
        BaseAuthManager._get_token_signer.cache_clear()  # type: ignore[attr-defined]
        BaseAuthManager._get_token_validator.cache_clear()  # type: ignore[attr-defined]
        settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC = saved
        settings.reconfigure_orm()


@pytest.fixture
def bobs_page(site: Site) -> Iterator[int]:
    """Bob's page, served by a stand-in task server that admits the proxy's secret only."""

    async def page(request: Request) -> Response:
        if request.headers.get(SECRET_HEADER) != SECRET:
            return Response("missing or wrong secret\n", status_code=403)
        return HTMLResponse(PAGE % {"master": json.dumps(site.url)})

    port = free_port()
    server, thread = serve(Starlette(routes=[Route("/det/proxy/{task_id:int}/{rest:path}", page)]), port)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def bobs_tensorboard(site: Site, port: int) -> int:
    """Bob's TensorBoard of his experiment (which alice may read), serving at ``port`` as its
    runner reports it."""
    experiment = site.people.add_experiment(owner="bob")
    site.people.add_trial(experiment, state="COMPLETED")
    with site.api("bob") as bob:
        created = bob.post("/tasks", json={"type": "tensorboard", "experiment_ids": [experiment]})
    assert created.status_code == 200, created.text
    task_id = int(created.json()["task"]["id"])
    with site.people.db.begin() as conn:
        answer = trials.acquire(
            conn, task_id, 0, {**SLOT_TASK, "dag_id": f"det_exp_{task_id}"}, dry_run=False
        )
    assert answer["status"] == "run", answer
    with site.people.db.begin() as conn:
        conn.execute(
            schema.trials.update().where(schema.trials.c.experiment_id == task_id).values(state="RUNNING")
        )
        trial_id = (
            conn.execute(schema.trials.select().where(schema.trials.c.experiment_id == task_id)).one().id
        )
    ready = httpx.post(
        f"{site.url}/det/api/v1/internal/trials/{trial_id}/task/ready",
        headers={"Authorization": f"Bearer {SERVICE_TOKEN}"},
        json={"port": port, "secret": SECRET, "address": "127.0.0.1"},
    )
    assert ready.status_code == 200, ready.text
    return task_id


def test_a_tasks_page_cannot_use_its_visitors_airflow_login(
    site: Site,
    bobs_page: int,
    browser: Browser,  # noqa: F811
) -> None:
    task_id = bobs_tensorboard(site, bobs_page)
    with site.api("alice") as alice:
        assert alice.get(f"/tasks/{task_id}").json()["task"]["ready"] is True
        assert alice.get("/webhooks").json()["webhooks"] == []

    context = browser.new_context()
    try:
        # Alice's login, as Airflow's login page leaves it: the _token cookie of the master's host.
        context.add_cookies(
            [
                {
                    "name": "_token",
                    "value": site.tokens["alice"],
                    "url": site.url,
                    "httpOnly": True,
                    "sameSite": "Lax",
                }
            ]
        )
        tab = context.new_page()
        tab.goto(f"{site.url}/det/proxy/{task_id}/")

        # The page itself works: shown, its script run, on the task's own origin.
        expect(tab.locator("#title")).to_have_text("Bob's TensorBoard")
        expect(tab.locator("#out")).not_to_have_text("running")
        said, landed = json.loads(tab.locator("#out").inner_text()), tab.url
        screenshot(tab, "task-origin-bobs-page")
    finally:
        context.close()

    # Nothing the script asked of the master answered as alice.
    for attempt in ("me", "webhook", "webhook_form", "me_here"):
        assert "alice" not in said[attempt], said
        assert not said[attempt].startswith(("200", "201")), said
    with site.api("alice") as alice:
        assert alice.get("/webhooks").json()["webhooks"] == [], "the page created a webhook as alice"
        assert alice.get("/me").json()["username"] == "alice"  # her login itself still works
    # The page ran on the task's own origin.
    port = site.url.rsplit(":", 1)[1]
    assert said["origin"] == f"http://task-{task_id}.localhost:{port}"
    assert landed.startswith(f"http://task-{task_id}.localhost:{port}/det/proxy/{task_id}/")
