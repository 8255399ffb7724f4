"""The master's OpenAPI document is a typed contract: every route names the model of the body it takes
and of the answer it gives, so clients and the web UI's generated types can rely on it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute

from det_airflow.master.app import create_app

# Commands whose path says everything: they take no body.
BODILESS_COMMANDS = {
    ("POST", "/api/v1/experiments/{experiment_id}/{action}"),
    ("POST", "/api/v1/trials/{trial_id}/kill"),
    ("POST", "/api/v1/tasks/{task_id}/kill"),
    ("POST", "/api/v1/internal/experiments/{experiment_id}/finalize"),
    ("POST", "/api/v1/internal/hosts/{host_id}/removals/claim"),
    ("POST", "/api/v1/models/{name}/archive"),
    ("POST", "/api/v1/models/{name}/unarchive"),
    ("POST", "/api/v1/webhooks/{webhook_id}/test"),
    ("POST", "/api/v1/workspaces/{workspace_id}/archive"),
    ("POST", "/api/v1/workspaces/{workspace_id}/unarchive"),
    ("POST", "/api/v1/projects/{project_id}/archive"),
    ("POST", "/api/v1/projects/{project_id}/unarchive"),
    ("POST", "/api/v1/agents/{agent_id}/enable"),
    ("POST", "/api/v1/agents/{agent_id}/slots/{slot_id}/enable"),
    ("POST", "/api/v1/agents/{agent_id}/slots/{slot_id}/disable"),
}
_BODY_METHODS = {"post", "put", "patch"}
_SCHEMA_KEYS = {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app().openapi()


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return document["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _untyped_fields(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Why ``schema`` does not describe an object with typed fields: empty when it does."""
    model = _resolve(document, schema)
    if "$ref" not in schema:
        return [f"not a named model: {schema}"]
    if model.get("type") != "object":
        return [f"{schema['$ref']} is not an object"]
    properties = model.get("properties") or {}
    if not properties and model.get("additionalProperties") is not False:
        return [f"{schema['$ref']} has no fields and allows any"]
    return [
        f"{schema['$ref']}.{name} has no type"
        for name, field in properties.items()
        if not _SCHEMA_KEYS & set(field)
    ]


def _route_names(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for method, path, _ in _operations(document)}


def test_the_document_lists_every_route_of_the_master(document: dict[str, Any]) -> None:
    routes = {
        (method, route.path_format)
        for route in create_app().routes
        if isinstance(route, APIRoute) and route.include_in_schema
        for method in route.methods
    }

    assert len(routes) > 40
    assert _route_names(document) == routes


def test_every_answer_is_a_typed_model(document: dict[str, Any]) -> None:
    problems = []
    for method, path, operation in _operations(document):
        content = operation["responses"].get("200", {}).get("content") or {}
        if not content:
            problems.append(f"{method} {path}: no 200 answer described")
        for media_type, described in content.items():
            schema = described.get("schema") or {}
            if media_type == "application/json":
                problems += [f"{method} {path}: {p}" for p in _untyped_fields(document, schema)]
            elif schema.get("type") != "string":
                problems.append(f"{method} {path}: {media_type} answer without a schema")

    assert problems == []


def test_every_route_that_takes_a_body_names_its_model(document: dict[str, Any]) -> None:
    problems = []
    for method, path, operation in _operations(document):
        body = operation.get("requestBody")
        if body is None:
            if method.lower() in _BODY_METHODS and (method, path) not in BODILESS_COMMANDS:
                problems.append(f"{method} {path}: takes no declared body")
            continue
        content = body["content"]
        if set(content) == {"application/octet-stream"}:
            # A file's bytes, streamed: described as binary, nothing to type.
            if content["application/octet-stream"].get("schema") != {"type": "string", "format": "binary"}:
                problems.append(f"{method} {path}: a binary body without its schema")
            continue
        schema = content["application/json"]["schema"]
        problems += [f"{method} {path} body: {p}" for p in _untyped_fields(document, schema)]

    assert problems == []


def _declares_a_binary_body(route: APIRoute) -> bool:
    content = ((route.openapi_extra or {}).get("requestBody") or {}).get("content") or {}
    return set(content) == {"application/octet-stream"}


def test_no_route_reads_its_request_by_hand() -> None:
    by_hand = [
        f"{sorted(route.methods)} {route.path}"
        for route in create_app().routes
        if isinstance(route, APIRoute)
        and route.dependant.request_param_name is not None
        # The proxy to tasks' servers passes requests on whole: reading them by hand is its job.
        and not route.path.startswith("/proxy/")
        # A file's bytes are streamed, never held whole: the route declares them as a binary body.
        and not _declares_a_binary_body(route)
    ]

    assert by_hand == []


def test_the_slot_answer_names_each_status(document: dict[str, Any]) -> None:
    status = document["components"]["schemas"]["SlotStatus"]

    assert sorted(status["enum"]) == ["done", "refused", "run", "wait"]
