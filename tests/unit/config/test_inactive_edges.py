"""The one-line warning for fields det-airflow accepts but does not act on: optimizations and empty values."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import parse_config

from ._configs import minimal

WARNING = "accepted but not acted on by det-airflow: "


def test_an_optimization_off_its_default_is_named_under_optimizations() -> None:
    cfg = parse_config(
        minimal(
            optimizations={
                "mixed_precision": "O1",
                "average_training_metrics": True,
                "aggregation_frequency": 4,
            }
        )
    )
    assert cfg.warnings == (WARNING + "optimizations.mixed_precision",)


def test_two_inactive_optimizations_are_named_in_the_order_written() -> None:
    cfg = parse_config(minimal(optimizations={"tensor_fusion_threshold": 32, "gradient_compression": True}))
    assert cfg.warnings == (
        WARNING + "optimizations.tensor_fusion_threshold, optimizations.gradient_compression",
    )


@pytest.mark.parametrize(
    "section", [{"resources": {"agent_label": ""}}, {"environment": {"proxy_ports": ""}}]
)
def test_an_empty_string_sets_nothing_and_draws_no_warning(section: dict[str, Any]) -> None:
    assert parse_config(minimal(**section)).warnings == ()


def test_a_non_empty_inactive_resources_field_is_named() -> None:
    assert parse_config(minimal(resources={"agent_label": "a100"})).warnings == (
        WARNING + "resources.agent_label",
    )
