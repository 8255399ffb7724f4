"""Integers past what the database holds, in paths, queries and bodies: a 422 naming the field,
never a 500. Every route of the master is tried, so a route added later is tried too."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.dependencies.utils import get_flat_dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel

from det_airflow.api import models
from det_airflow.config._limits import INT64_MAX, INT64_MIN
from det_airflow.webui import pages
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People
from tests.unit.master.served import give_token

TRIAL_TOKEN = "bounds-trial-token"
RANGE = f"must be an integer from {INT64_MIN} to {INT64_MAX}"


def _client(people: People) -> TestClient:
    """The same app, answering a server error as the 500 a client would see."""
    return TestClient(people.client.app, raise_server_exceptions=False)


def _int_routes(people: People) -> Iterator[tuple[str, str, list[str], list[str]]]:
    """(method, path, integer path parameters, other path parameters) of every route of the app."""
    for route in people.client.app.routes:  # type: ignore[attr-defined]
        if not isinstance(route, APIRoute):
            continue
        params = get_flat_dependant(route.dependant).path_params
        ints = [p.name for p in params if p.field_info.annotation is int]
        others = [p.name for p in params if p.field_info.annotation is not int]
        for method in sorted(route.methods - {"HEAD"}):
            if ints:
                yield method, route.path, ints, others


def _filled(path: str, values: dict[str, Any]) -> str:
    for name, value in values.items():
        path = re.sub(r"\{" + name + r"(:path)?\}", str(value), path)
    return path


@pytest.mark.parametrize("big", [2**64, -(2**64), 2**63, 10**30])
def test_every_integer_path_parameter_past_64_bits_is_a_422_naming_it(
    people: People, service_headers: dict[str, str], big: int
) -> None:
    experiment = people.add_experiment(owner="alice")
    trial = people.add_trial(experiment, state="ACTIVE")
    give_token(people, trial, TRIAL_TOKEN)
    client = _client(people)
    # Each caller gets past the routes' login checks: a person (admin), det's tasks, the trial.
    callers = {
        "admin": {"X-Test-User": "admin", "Authorization": "Bearer login-of-admin"},
        "service": {"X-Test-User": "admin", **service_headers},
        "trial": {"X-Test-User": "admin", "Authorization": f"Bearer {TRIAL_TOKEN}"},
    }
    tried: set[str] = set()
    wrong: list[str] = []
    for method, path, ints, others in _int_routes(people):
        for name in ints:
            values = {n: trial if n == "trial_id" else experiment for n in ints}
            values |= {n: "x" for n in others} | {name: big}
            url = _filled(path, values)
            for who, headers in callers.items():
                answer = client.request(method, url, headers=headers, json={})
                detail = (
                    answer.json().get("detail")
                    if answer.headers.get("content-type") == "application/json"
                    else None
                )
                expected = [{"loc": ["path", name], "msg": f"{RANGE}, got {big}"}]
                got = (
                    [{k: d.get(k) for k in ("loc", "msg")} for d in detail]
                    if isinstance(detail, list)
                    else detail
                )
                if answer.status_code != 422 or got != expected:
                    wrong.append(f"{method} {url} as {who}: {answer.status_code} {answer.text[:200]}")
            tried.add(f"{method} {path}")
    assert not wrong, "\n".join(wrong)
    # The routes the review found answering 500, among all those tried.
    assert {
        "GET /api/v1/experiments/{experiment_id}",
        "DELETE /api/v1/experiments/{experiment_id}",
        "GET /api/v1/trials/{trial_id}/logs",
        "GET /api/v1/projects/{project_id}",
        "GET /api/v1/workspaces/{workspace_id}/projects",
        "GET /api/v1/tasks/{task_id}",
        "POST /api/v1/tasks/{task_id}/kill",
        "DELETE /api/v1/webhooks/{webhook_id}",
        "GET /api/v1/models/{name}/versions/{version}",
        "POST /api/v1/internal/experiments/{experiment_id}/slots/{slot}/acquire",
        "POST /api/v1/internal/hosts/{host_id}/removals/{removal_id}/done",
        "GET /proxy/{task_id}/{path:path}",
    } <= tried
    assert len(tried) > 60


@pytest.mark.parametrize(
    "path, name",
    [
        ("/trials/{trial}/logs?limit=18446744073709551616", "limit"),
        ("/trials/{trial}/logs?tail=-18446744073709551616", "tail"),
        ("/trials/{trial}/logs?after=9223372036854775808", "after"),
        ("/trials/{trial}/logs?rank=0&rank=18446744073709551616", "rank"),
        ("/ui/resolve?dag_id=det_1&map_index=18446744073709551616", "map_index"),
        ("/experiments/{experiment}/curves?group=training&points=1" + "0" * 5000, "points"),
        ("/jobs?limit=18446744073709551616", "limit"),
    ],
)
def test_integer_query_parameters_past_64_bits_are_a_422_naming_them(
    people: People, path: str, name: str
) -> None:
    experiment = people.add_experiment(owner="alice")
    trial = people.add_trial(experiment, state="ACTIVE")
    answer = _client(people).get(
        "/api/v1" + path.format(trial=trial, experiment=experiment),
        headers={"X-Test-User": "alice", "Authorization": "Bearer login-of-alice"},
    )
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    assert problem["loc"] == ["query", name]
    assert problem["msg"].startswith(RANGE)


def test_the_largest_integers_still_reach_the_route(people: People) -> None:
    for value in (INT64_MAX, INT64_MIN):
        answer = people.call("alice", "GET", f"/experiments/{value}")
        assert answer.status_code == 404
        assert answer.json()["detail"] == f"experiment {value} not found"


def _body_models() -> Iterator[type[BaseModel]]:
    """Every model a route of the master reads a request body into, and the models inside them."""
    seen: set[type[BaseModel]] = set()
    pending = [
        value
        for value in vars(models).values()
        if isinstance(value, type) and issubclass(value, models._Body)
    ]
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for field in model.model_fields.values():
            for arg in _type_args(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    pending.append(arg)


def _type_args(annotation: Any) -> Iterator[Any]:
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _type_args(arg)


def _holding(annotation: Any, number: int) -> Any:
    """A value of type ``annotation`` with ``number`` where its integer goes."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is int:
        return number
    if origin is typing.Annotated:
        return _holding(args[0], number)
    if origin is dict:
        return {"key": _holding(args[1], number)}
    if origin is list:
        return [_holding(args[0], number)]
    return _holding(next(a for a in args if any(b is int for b in _type_args(a))), number)


def _int_fields(model: type[BaseModel]) -> list[str]:
    return [
        name
        for name, field in model.model_fields.items()
        if any(arg is int for arg in _type_args(field.annotation))
    ]


def test_every_integer_of_every_request_body_is_bounded_naming_its_field() -> None:
    checked = 0
    for model in _body_models():
        assert issubclass(model, models._Body), f"{model.__name__} is read from bodies but is no _Body"
        for name in _int_fields(model):
            for big in (2**64, -(2**64)):
                value = _holding(model.model_fields[name].annotation, big)
                try:
                    model.model_validate({name: value})
                except Exception as exc:  # noqa: BLE001 - a ValidationError is expected; asserted below
                    errors = exc.errors() if hasattr(exc, "errors") else []
                    at_field = [e for e in errors if e["loc"][:1] == (name,)]
                    assert at_field, f"{model.__name__}.{name}={big}: {exc}"
                    assert any(
                        str(abs(big)) in e["msg"] or "less than" in e["msg"] or "greater" in e["msg"]
                        for e in at_field
                    ), f"{model.__name__}.{name}: {at_field}"
                else:
                    pytest.fail(f"{model.__name__}.{name} accepted {big}")
                checked += 1
    assert checked > 30


def test_integers_past_64_bits_in_bodies_are_a_422_naming_the_field(
    people: People, creator: Creator, service_headers: dict[str, str]
) -> None:
    client = _client(people)
    admin = {"X-Test-User": "admin", "Authorization": "Bearer login-of-admin"}
    experiment = people.add_experiment(owner="admin")
    trial = people.add_trial(experiment, state="ACTIVE")
    give_token(people, trial, TRIAL_TOKEN)
    cases = [
        (
            "POST",
            "/jobs/update",
            admin,
            {"updates": [{"job_id": 2**64, "priority": 5}]},
            ["body", "updates", 0, "job_id"],
        ),
        (
            "POST",
            "/tasks",
            admin,
            {"type": "tensorboard", "experiment_ids": [2**64]},
            ["body", "experiment_ids"],
        ),
        ("POST", "/experiments", admin, {"config": "name: x", "parent_id": 2**64}, ["body", "parent_id"]),
        (
            "POST",
            f"/internal/trials/{trial}/exit",
            service_headers,
            {"exit_code": 2**64},
            ["body", "exit_code"],
        ),
        (
            "POST",
            f"/runtime/trials/{trial}/metrics",
            {"Authorization": f"Bearer {TRIAL_TOKEN}"},
            {
                "reports": [
                    {"group": "training", "steps_completed": 1, "metrics": {"loss": 0.1, "seen": 2**64}}
                ]
            },
            ["body", "reports", 0, "metrics"],
        ),
        (
            "POST",
            f"/runtime/trials/{trial}/searcher/completed",
            {"Authorization": f"Bearer {TRIAL_TOKEN}"},
            {"length": -(2**64)},
            ["body", "length"],
        ),
    ]
    for method, path, headers, body, loc in cases:
        answer = client.request(method, f"/api/v1{path}", headers=headers, json=body)
        assert answer.status_code == 422, (path, answer.text)
        problems = [p for p in answer.json()["detail"] if p["loc"] == loc]
        assert problems and "outside the range of a 64-bit integer" in problems[0]["msg"], (path, answer.text)


def test_an_overflow_past_the_checks_is_a_422_not_a_500(people: People) -> None:
    from sqlalchemy import select

    from det_airflow.master import schema

    def look_up(number: int) -> dict[str, Any]:
        # A route that computes an id the checks never saw (a sum of two bounded ones).
        with people.db.read() as conn:
            conn.execute(select(schema.experiments.c.id).where(schema.experiments.c.id == number * 4))
        return {}

    app = people.client.app  # type: ignore[attr-defined]
    app.add_api_route("/overflow/{number}", look_up)
    answer = _client(people).get(f"/overflow/{INT64_MAX}")
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("invalid value: a number too large for the master's database")


@pytest.mark.parametrize("path", ["a" * 5000, "é" * 200, ("b" * 250 + "/") * 30 + "c"])
def test_a_web_ui_path_too_long_for_a_file_name_is_not_found(
    people: People, tmp_path: Path, path: str
) -> None:
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html>")
    people.client.app.include_router(pages.router(static))  # type: ignore[attr-defined]
    answer = _client(people).get(f"/ui/{path}", headers={"X-Test-User": "viewer"})
    assert answer.status_code == 404
    assert answer.json()["detail"].startswith("the det web UI has no file")
