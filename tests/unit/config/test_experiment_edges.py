"""Top-level edges: the name length limit, workspace/project pairs, and log policy mistakes word for word."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import LogPolicy, parse_config

from ._configs import minimal, problems_of

POLICY_HINT = "expected a mapping {name, pattern, action}, got "


def test_a_name_of_exactly_128_characters_is_accepted() -> None:
    assert parse_config(minimal(name="n" * 128)).name == "n" * 128


def test_a_name_of_129_characters_is_refused_showing_its_start_and_length() -> None:
    name = "0123456789abcdefghijKLMNOP" + "z" * 103
    assert problems_of(minimal(name=name)) == [
        (
            "name",
            "expected a string of at most 128 characters, got '0123456789abcdefghij... (129 characters)'",
        )
    ]


@pytest.mark.parametrize(
    ("top", "path", "message"),
    [
        ({"workspace": "research"}, "project", "required when 'workspace' is set (give both or neither)"),
        ({"project": "vision"}, "workspace", "required when 'project' is set (give both or neither)"),
    ],
)
def test_workspace_and_project_come_as_a_pair(top: dict[str, Any], path: str, message: str) -> None:
    assert problems_of(minimal(**top)) == [(path, message + "; expected a non-empty string")]


@pytest.mark.parametrize(
    ("top", "field"),
    [
        ({"workspace": "", "project": "vision"}, "workspace"),
        ({"workspace": "research", "project": ""}, "project"),
    ],
)
def test_an_empty_workspace_or_project_is_refused(top: dict[str, Any], field: str) -> None:
    assert problems_of(minimal(**top)) == [(field, "expected a non-empty string, got ''")]


def test_every_log_policy_that_is_not_a_mapping_is_reported() -> None:
    assert problems_of(minimal(log_policies=["oom", 5])) == [
        ("log_policies[0]", POLICY_HINT + "'oom'"),
        ("log_policies[1]", POLICY_HINT + "5"),
    ]


@pytest.mark.parametrize(
    ("policy", "path", "message"),
    [
        (
            {"pattern": "x", "actoin": "exclude_node"},
            "log_policies[0].actoin",
            "unknown field; did you mean 'action'?",
        ),
        (
            {"pattern": "x", "action": {"type": "exclude_node", "typ": 1}},
            "log_policies[0].action.typ",
            "unknown field; did you mean 'type'?",
        ),
        (
            {"pattern": "x", "action": {}},
            "log_policies[0].action.type",
            "missing required field; expected one of cancel_retries, exclude_node",
        ),
    ],
)
def test_a_bad_log_policy_field_is_named_exactly(policy: dict[str, Any], path: str, message: str) -> None:
    assert problems_of(minimal(log_policies=[policy])) == [(path, message)]


def test_the_older_action_form_reads_its_type() -> None:
    cfg = parse_config(minimal(log_policies=[{"pattern": "NCCL", "action": {"type": "exclude_node"}}]))
    assert cfg.log_policies == (LogPolicy("NCCL", "exclude_node"),)
