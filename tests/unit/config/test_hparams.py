"""The hyperparameters section: constants, ranges, categories, nested groups, grid needs."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    config_to_dict,
    hparam_leaves,
    parse_config,
)

from ._configs import MNIST_CONST, assert_problem, minimal, problems_of

GRID = {"name": "grid", "metric": "validation_loss", "max_length": {"batches": 100}}


def hparams(**values: Any) -> dict[str, Any]:
    return minimal(hyperparameters=values)


def test_scalars_and_lists_are_constants() -> None:
    cfg = parse_config(hparams(lr=0.1, layers=[64, 32], name="resnet", flag=True, nothing=None))
    assert cfg.hyperparameters == {
        "lr": ConstHP(0.1),
        "layers": ConstHP([64, 32]),
        "name": ConstHP("resnet"),
        "flag": ConstHP(True),
        "nothing": ConstHP(None),
    }


def test_every_typed_hyperparameter() -> None:
    cfg = parse_config(
        hparams(
            c={"type": "const", "val": {"any": "thing"}},
            n={"type": "int", "minval": 8, "maxval": 64, "count": 3},
            lr={"type": "double", "minval": 0.0001, "maxval": 1},
            wd={"type": "log", "minval": -5, "maxval": -1, "base": 2},
            act={"type": "categorical", "vals": ["relu", "tanh"]},
        )
    )
    assert cfg.hyperparameters == {
        "c": ConstHP({"any": "thing"}),
        "n": IntHP(8, 64, 3),
        "lr": DoubleHP(0.0001, 1.0),
        "wd": LogHP(-5.0, -1.0, base=2.0),
        "act": CategoricalHP(("relu", "tanh")),
    }


def test_log_needs_a_base_as_in_determined() -> None:
    problems = problems_of(hparams(lr={"type": "log", "minval": -4, "maxval": -1}))
    assert problems == [
        (
            "hyperparameters.lr.base",
            "required for a log hyperparameter (e.g. base: 10); expected a number > 0",
        )
    ]


def test_a_mapping_without_type_is_a_nested_group_to_any_depth() -> None:
    cfg = parse_config(
        hparams(
            optimizer={"name": "adam", "lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
            model={"encoder": {"layers": {"type": "int", "minval": 1, "maxval": 4}, "width": 128}},
        )
    )
    assert cfg.hyperparameters["optimizer"] == {"name": ConstHP("adam"), "lr": DoubleHP(0.001, 0.1)}
    assert cfg.hyperparameters["model"] == {"encoder": {"layers": IntHP(1, 4), "width": ConstHP(128)}}


def test_leaves_are_flattened_with_their_paths_in_the_order_written() -> None:
    cfg = parse_config(hparams(b=1, a={"y": 2, "x": {"z": 3}}, c=4))
    assert hparam_leaves(cfg.hyperparameters) == [
        (("b",), ConstHP(1)),
        (("a", "y"), ConstHP(2)),
        (("a", "x", "z"), ConstHP(3)),
        (("c",), ConstHP(4)),
    ]


def test_normalized_form_uses_typed_leaves_and_plain_groups() -> None:
    cfg = parse_config(hparams(lr=0.1, opt={"m": {"type": "categorical", "vals": [0.9, 0.99]}}))
    assert config_to_dict(cfg)["hyperparameters"] == {
        "lr": {"type": "const", "val": 0.1},
        "opt": {"m": {"type": "categorical", "vals": [0.9, 0.99]}},
    }


def test_grid_search_with_counts_everywhere() -> None:
    config = hparams(
        n={"type": "int", "minval": 1, "maxval": 4, "count": 4},
        opt={"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3}},
        act={"type": "categorical", "vals": ["relu"]},
    )
    config["searcher"] = GRID
    assert parse_config(config).searcher.name == "grid"


def test_grid_search_names_every_range_without_count() -> None:
    config = hparams(
        n={"type": "int", "minval": 1, "maxval": 4},
        optimizer={"lr": {"type": "double", "minval": 0.1, "maxval": 1}},
    )
    config["searcher"] = GRID
    problems = problems_of(config)
    assert_problem(problems, "hyperparameters.n", "grid search needs 'count'")
    assert_problem(problems, "hyperparameters.optimizer.lr", "grid search needs 'count'")


@pytest.mark.parametrize(
    "value",
    [
        64,
        {"type": "int", "minval": 16, "maxval": 128},
        {"type": "categorical", "vals": [32, 64]},
        {"type": "const", "val": 64},
    ],
)
def test_global_batch_size_may_be_an_int_or_a_searchable_int(value: Any) -> None:
    config = hparams(global_batch_size=value)
    config["resources"] = {"slots_per_trial": 8}
    assert "global_batch_size" in parse_config(config).hyperparameters


def test_global_batch_size_with_cpu_only_trials() -> None:
    config = hparams(global_batch_size=1)
    config["resources"] = {"slots_per_trial": 0}
    assert parse_config(config).hyperparameters["global_batch_size"] == ConstHP(1)


def test_mnist_const_hyperparameters() -> None:
    cfg = parse_config(MNIST_CONST)
    assert cfg.hyperparameters["global_batch_size"] == ConstHP(64)
    assert cfg.hyperparameters["dropout2"] == ConstHP(0.5)


BAD_HPARAMS = [
    pytest.param({"lr": {"type": "float", "minval": 0, "maxval": 1}}, "hyperparameters.lr.type",
                 "unknown hyperparameter type 'float'; expected one of const, int, double, log, categorical",
                 id="unknown-type"),
    pytest.param({"lr": {"type": "dobule", "minval": 0, "maxval": 1}}, "hyperparameters.lr.type",
                 "did you mean 'double'?", id="type-typo"),
    pytest.param({"n": {"type": "int", "minval": 1.5, "maxval": 4}}, "hyperparameters.n.minval",
                 "expected an integer, got 1.5", id="int-float-bound"),
    pytest.param({"n": {"type": "int", "minval": 8, "maxval": 4}}, "hyperparameters.n.maxval",
                 "expected an integer > minval (8); for one value use {type: const}, got 4", id="int-reversed"),
    pytest.param({"n": {"type": "int", "minval": 1, "maxval": 4, "count": 0}}, "hyperparameters.n.count",
                 "expected an integer >= 1, got 0", id="count-zero"),
    pytest.param({"n": {"type": "int", "min_val": 1, "maxval": 4}}, "hyperparameters.n.min_val",
                 "unknown field; did you mean 'minval'?", id="field-typo"),
    pytest.param({"lr": {"type": "double", "minval": 0.1}}, "hyperparameters.lr.maxval",
                 "missing required field; expected a number", id="double-no-maxval"),
    pytest.param({"lr": {"type": "double", "minval": "low", "maxval": 1}}, "hyperparameters.lr.minval",
                 "expected a number, got 'low'", id="double-text-bound"),
    pytest.param({"lr": {"type": "double", "minval": 1, "maxval": 0.1}}, "hyperparameters.lr.maxval",
                 "expected a number > minval (1); for one value use {type: const}, got 0.1", id="double-reversed"),
    pytest.param({"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 0}}, "hyperparameters.lr.base",
                 "expected a number > 0, got 0", id="log-base"),
    pytest.param({"act": {"type": "categorical", "vals": []}}, "hyperparameters.act.vals",
                 "expected a non-empty list, got []", id="categorical-empty"),
    pytest.param({"act": {"type": "categorical"}}, "hyperparameters.act.vals",
                 "missing required field; expected a non-empty list", id="categorical-no-vals"),
    pytest.param({"act": {"type": "categorical", "vals": "relu"}}, "hyperparameters.act.vals",
                 "expected a non-empty list, got 'relu'", id="categorical-scalar"),
    pytest.param({"x": {"type": "const"}}, "hyperparameters.x.val",
                 "missing required field; expected the constant value", id="const-no-val"),
    pytest.param({"optimizer": {"lr": {"type": "range", "minval": 0, "maxval": 1}}},
                 "hyperparameters.optimizer.lr.type", "unknown hyperparameter type 'range'", id="nested-bad"),
    pytest.param({"global_batch_size": "64"}, "hyperparameters.global_batch_size",
                 "expected an integer >= 1 (at least resources.slots_per_trial), got '64'", id="gbs-text"),
    pytest.param({"global_batch_size": 0}, "hyperparameters.global_batch_size",
                 "expected an integer >= 1", id="gbs-zero"),
    pytest.param({"global_batch_size": {"type": "double", "minval": 16, "maxval": 64}},
                 "hyperparameters.global_batch_size",
                 "expected an integer, or an int, categorical or const hyperparameter, got a double hyperparameter",
                 id="gbs-double"),
    pytest.param({"global_batch_size": {"small": 16}}, "hyperparameters.global_batch_size",
                 "got a nested group", id="gbs-group"),
    pytest.param({"global_batch_size": {"type": "categorical", "vals": [32, 0.5]}},
                 "hyperparameters.global_batch_size.vals[1]", "expected an integer >= 1", id="gbs-categorical"),
]  # fmt: skip


@pytest.mark.parametrize(("values", "path", "message"), BAD_HPARAMS)
def test_bad_hyperparameter_is_reported_at_its_path(values: dict[str, Any], path: str, message: str) -> None:
    assert_problem(problems_of(hparams(**values)), path, message)


def test_global_batch_size_must_cover_every_slot() -> None:
    config = hparams(global_batch_size=4, other={"type": "int", "minval": 1, "maxval": 2})
    config["resources"] = {"slots_per_trial": 8}
    assert_problem(problems_of(config), "hyperparameters.global_batch_size", "expected an integer >= 8")


def test_a_searchable_global_batch_size_must_cover_every_slot() -> None:
    config = hparams(global_batch_size={"type": "int", "minval": 2, "maxval": 64})
    config["resources"] = {"slots_per_trial": 4}
    assert_problem(
        problems_of(config),
        "hyperparameters.global_batch_size.minval",
        "expected an integer >= 4 (at least resources.slots_per_trial), got 2",
    )


def test_the_section_must_be_a_mapping() -> None:
    assert_problem(
        problems_of(minimal(hyperparameters=[1, 2])),
        "hyperparameters",
        "expected a mapping of hyperparameter names to values, got [1, 2]",
    )
