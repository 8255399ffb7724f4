"""--config overrides and run confs: exact messages, the last list index, and every mistake reported."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import apply_run_conf, parse_config
from det_airflow.errors import ConfigError

from ._configs import minimal

SETTABLE = (
    "a run may set description, hyperparameters, searcher.max_trials, searcher.max_length, "
    "resources.resource_pool, resources.priority"
)


def override_problems(config: dict[str, Any], overrides: list[str]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        parse_config(config, overrides=overrides)
    return info.value.problems


def test_an_unreadable_value_quotes_the_first_line_of_the_yaml_error() -> None:
    assert override_problems(minimal(), ["labels=a: b: c"]) == [
        (
            "--config",
            "cannot read the value of 'labels=a: b: c' as YAML: "
            "invalid YAML at line 1, column 5: mapping values are not allowed here",
        )
    ]


def test_every_bad_override_is_reported_not_only_the_first() -> None:
    assert override_problems(minimal(), ["=4", "labels=[a, b", "searcher..metric=x"]) == [
        ("--config", "expected key=value (e.g. searcher.max_trials=4), got '=4'"),
        (
            "--config",
            "cannot read the value of 'labels=[a, b' as YAML: "
            "invalid YAML at line 2, column 1: did not find expected ',' or ']'",
        ),
        ("--config", "expected key=value (e.g. searcher.max_trials=4), got 'searcher..metric=x'"),
    ]


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("bind_mounts.0.read_only=true", "bind_mounts has no item 0"),
        ("environment.add_capabilities.0=SYS_ADMIN", "environment.add_capabilities has no item 0"),
    ],
)
def test_an_index_one_past_the_end_of_a_list_is_refused(override: str, where: str) -> None:
    config = minimal(bind_mounts=[], environment={"add_capabilities": []})
    assert override_problems(config, [override]) == [("--config", f"cannot apply {override!r}: {where}")]


def test_the_last_item_of_a_list_can_be_overridden() -> None:
    config = minimal(environment={"add_capabilities": ["NET_ADMIN"]})
    cfg = parse_config(config, overrides=["environment.add_capabilities.0=SYS_ADMIN"])
    assert cfg.environment.add_capabilities == ("SYS_ADMIN",)


def test_a_run_conf_key_it_may_not_set_lists_every_settable_field() -> None:
    assert apply_run_conf({}, {"seed": 1}) == [("seed", "cannot be set by a run; " + SETTABLE)]


def test_a_null_in_a_run_conf_leaves_the_field_and_the_rest_still_applies() -> None:
    data: dict[str, Any] = {"description": "from the YAML"}
    assert apply_run_conf(data, {"description": None, "searcher": {"max_trials": 3}}) == []
    assert data == {"description": "from the YAML", "searcher": {"max_trials": 3}}


def test_a_run_conf_creates_a_section_the_yaml_lacks() -> None:
    data: dict[str, Any] = {"searcher": {"name": "single"}}
    assert apply_run_conf(data, {"resources": {"priority": 10}}) == []
    assert data == {"searcher": {"name": "single"}, "resources": {"priority": 10}}


def test_a_run_conf_hyperparameter_on_a_yaml_without_any_says_it_has_none() -> None:
    data: dict[str, Any] = {"entrypoint": "x"}
    assert apply_run_conf(data, {"hyperparameters": {"lr": 0.1}}) == [
        ("hyperparameters.lr", "not a hyperparameter of this experiment (it has: none)")
    ]
    assert data == {"entrypoint": "x"}
