"""Every number has bounds: each is accepted at its edge and refused one step past it, on both sides,
with the field path and the range in the message. Integers must be integers: 3.0 is refused, as
Determined's master refuses it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from det_airflow.config import parse_config
from det_airflow.config._limits import INT32_MAX, INT64_MAX, MAX_DIVISOR, MAX_RUNGS, MAX_TRIALS

from ._configs import assert_problem, minimal, problems_of

RANDOM = {"name": "random", "metric": "loss", "max_trials": 4}
ASHA = {"name": "adaptive_asha", "metric": "loss", "max_trials": 4, "max_length": {"batches": 100}}
HALVING = {"name": "async_halving", "metric": "loss", "max_trials": 4, "num_rungs": 2, "max_length": 100}
TIMED = {"name": "adaptive_asha", "metric": "loss", "max_trials": 4, "time_metric": "batches", "max_time": 10}
STORAGE = {"type": "shared_fs", "host_path": "/ckpt"}
GRID = {"name": "grid", "metric": "loss"}


def with_value(path: str, value: Any, **top: Any) -> dict[str, Any]:
    """A valid config with ``value`` written at the dotted ``path``."""
    config = minimal(**copy.deepcopy(top))
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return config


# (path, lowest, highest, sections the field needs); past the highest the message names both ends.
INTEGERS = [
    ("max_restarts", 0, INT32_MAX, {}),
    ("scheduling_unit", 1, INT32_MAX, {}),
    ("records_per_epoch", 0, INT64_MAX, {}),
    ("preemption_timeout", 0, INT32_MAX, {}),
    ("min_validation_period.batches", 0, INT64_MAX, {}),
    ("min_checkpoint_period.epochs", 0, INT64_MAX, {}),
    ("resources.slots_per_trial", 0, INT32_MAX, {}),
    ("resources.max_slots", 1, INT32_MAX, {}),
    ("searcher.max_length.records", 0, INT64_MAX, {}),
    ("searcher.max_trials", 1, MAX_TRIALS, {"searcher": RANDOM}),
    ("searcher.max_concurrent_trials", 0, MAX_TRIALS, {"searcher": RANDOM}),
    ("searcher.max_rungs", 1, MAX_RUNGS, {"searcher": ASHA}),
    ("searcher.num_rungs", 1, MAX_RUNGS, {"searcher": HALVING}),
    ("searcher.max_time", 1, INT64_MAX, {"searcher": TIMED}),
    ("searcher.source_trial_id", 1, INT32_MAX, {}),
    ("checkpoint_storage.save_trial_best", 0, INT32_MAX, {"checkpoint_storage": STORAGE}),
    ("checkpoint_storage.save_experiment_best", 0, INT32_MAX, {"checkpoint_storage": STORAGE}),
    (
        "hyperparameters.n.count",
        1,
        MAX_TRIALS,
        {"hyperparameters": {"n": {"type": "double", "minval": 0, "maxval": 1}}},
    ),
]
# Ranges that are the field's meaning: both ends are always stated.
FIXED = [
    ("resources.priority", 1, 99),
    ("reproducibility.experiment_seed", 0, INT32_MAX),
]


@pytest.mark.parametrize(("path", "low", "high", "top"), INTEGERS, ids=[case[0] for case in INTEGERS])
def test_integer_edges_are_accepted(path: str, low: int, high: int, top: dict[str, Any]) -> None:
    for value in (low, high):
        parse_config(with_value(path, value, **top))


@pytest.mark.parametrize(("path", "low", "high", "top"), INTEGERS, ids=[case[0] for case in INTEGERS])
def test_integers_one_past_either_edge_are_refused(
    path: str, low: int, high: int, top: dict[str, Any]
) -> None:
    assert problems_of(with_value(path, low - 1, **top)) == [
        (path, f"expected an integer >= {low}, got {low - 1}")
    ]
    assert problems_of(with_value(path, high + 1, **top)) == [
        (path, f"expected an integer between {low} and {high}, got {high + 1}")
    ]


@pytest.mark.parametrize(("path", "low", "high"), FIXED, ids=[case[0] for case in FIXED])
def test_fixed_ranges_are_stated_whichever_side_is_missed(path: str, low: int, high: int) -> None:
    parse_config(with_value(path, low))
    parse_config(with_value(path, high))
    for value in (low - 1, high + 1):
        assert problems_of(with_value(path, value)) == [
            (path, f"expected an integer between {low} and {high}, got {value}")
        ]


def test_max_length_as_a_bare_integer_has_the_same_bounds() -> None:
    parse_config(with_value("searcher.max_length", INT64_MAX))
    assert problems_of(with_value("searcher.max_length", INT64_MAX + 1)) == [
        ("searcher.max_length", f"expected an integer between 0 and {INT64_MAX}, got {INT64_MAX + 1}")
    ]
    assert problems_of(with_value("searcher.max_length", -1)) == [
        ("searcher.max_length", "expected an integer >= 0, got -1")
    ]


def test_the_reported_attack_is_refused_with_the_range() -> None:
    assert problems_of(minimal(max_restarts=1e20)) == [
        ("max_restarts", f"expected an integer between 0 and {INT32_MAX}, got 1e+20")
    ]


@pytest.mark.parametrize("value", [3.0, 0.5, True, "3", float("inf"), float("nan")], ids=repr)
def test_integers_must_be_integers(value: Any) -> None:
    (problem,) = problems_of(minimal(max_restarts=value))
    assert problem[0] == "max_restarts"
    assert problem[1].startswith("expected an integer")


def test_bracket_rungs_are_bounded_like_max_rungs() -> None:
    parse_config(with_value("searcher.bracket_rungs", [MAX_RUNGS, 1], searcher=ASHA))
    problems = problems_of(with_value("searcher.bracket_rungs", [MAX_RUNGS + 1, 0], searcher=ASHA))
    assert problems == [
        ("searcher.bracket_rungs[0]", f"expected an integer between 1 and {MAX_RUNGS}, got {MAX_RUNGS + 1}"),
        ("searcher.bracket_rungs[1]", "expected an integer >= 1, got 0"),
    ]


def test_shm_size_is_bounded_in_bytes_and_with_a_unit() -> None:
    assert parse_config(with_value("resources.shm_size", 0)).resources.shm_size == 0
    assert parse_config(with_value("resources.shm_size", INT64_MAX)).resources.shm_size == INT64_MAX
    for written in (INT64_MAX + 1, "9" * 400 + "T", "8589934592G"):
        (problem,) = problems_of(with_value("resources.shm_size", written))
        assert problem[0] == "resources.shm_size"
        assert problem[1].startswith("expected a size in bytes")
    assert problems_of(with_value("resources.shm_size", -1))[0][0] == "resources.shm_size"


def test_weight_is_a_finite_number_above_zero() -> None:
    assert parse_config(with_value("resources.weight", 1e-9)).resources.weight == 1e-9
    for value in (0, -1, float("inf"), float("nan")):
        assert problems_of(with_value("resources.weight", value)) == [
            ("resources.weight", f"expected a number > 0, got {value!r}")
        ]


def test_divisor_is_above_one_and_at_most_the_cap() -> None:
    for value in (1.0001, MAX_DIVISOR):
        parse_config(with_value("searcher.divisor", value, searcher=ASHA))
    assert problems_of(with_value("searcher.divisor", 1, searcher=ASHA)) == [
        ("searcher.divisor", "expected a number > 1, got 1")
    ]
    assert problems_of(with_value("searcher.divisor", MAX_DIVISOR + 0.5, searcher=ASHA)) == [
        ("searcher.divisor", f"expected a number > 1 and <= {MAX_DIVISOR}, got {MAX_DIVISOR + 0.5}")
    ]


# --- hyperparameters at their edges ------------------------------------------------------------


def hparams(**specs: Any) -> dict[str, Any]:
    return minimal(hyperparameters=specs)


@pytest.mark.parametrize("kind", ["int", "double"])
def test_a_range_needs_maxval_above_minval(kind: str) -> None:
    parse_config(hparams(x={"type": kind, "minval": 1, "maxval": 2}))
    for maxval in (1, 0):
        (problem,) = problems_of(hparams(x={"type": kind, "minval": 1, "maxval": maxval}))
        assert problem[0] == "hyperparameters.x.maxval"
        assert "> minval (1); for one value use {type: const}" in problem[1]


def test_log_ranges_need_maxval_above_minval_and_a_base() -> None:
    parse_config(hparams(lr={"type": "log", "minval": -4, "maxval": -3, "base": 10}))
    assert_problem(
        problems_of(hparams(lr={"type": "log", "minval": -4, "maxval": -4, "base": 10})),
        "hyperparameters.lr.maxval",
        "expected a number > minval (-4)",
    )
    assert problems_of(hparams(lr={"type": "log", "minval": -4, "maxval": -1})) == [
        (
            "hyperparameters.lr.base",
            "required for a log hyperparameter (e.g. base: 10); expected a number > 0",
        )
    ]


def test_log_values_must_be_finite_floats() -> None:
    parse_config(hparams(lr={"type": "log", "minval": -300, "maxval": 300, "base": 10}))
    assert problems_of(hparams(lr={"type": "log", "minval": -4, "maxval": 400, "base": 10})) == [
        (
            "hyperparameters.lr.maxval",
            "expected an exponent for which 10 ** maxval is a finite non-zero float, got 400",
        )
    ]
    assert problems_of(hparams(lr={"type": "log", "minval": -400, "maxval": 1, "base": 10})) == [
        (
            "hyperparameters.lr.minval",
            "expected an exponent for which 10 ** minval is a finite non-zero float, got -400",
        )
    ]


def test_int_bounds_fit_in_64_bits() -> None:
    parse_config(hparams(n={"type": "int", "minval": -(2**63), "maxval": INT64_MAX}))
    (problem,) = problems_of(hparams(n={"type": "int", "minval": 0, "maxval": INT64_MAX + 1}))
    assert problem == (
        "hyperparameters.n.maxval",
        f"expected an integer between {-(2**63)} and {INT64_MAX}, got {INT64_MAX + 1}",
    )


def test_double_bounds_are_finite() -> None:
    (problem,) = problems_of(hparams(x={"type": "double", "minval": 0, "maxval": float("inf")}))
    assert problem == ("hyperparameters.x.maxval", "expected a number, got inf")


def test_an_int_count_beyond_the_range_is_clamped_not_refused() -> None:
    config = hparams(n={"type": "int", "minval": 1, "maxval": 3, "count": MAX_TRIALS})
    config["searcher"] = GRID
    assert parse_config(config).hyperparameters["n"].count == MAX_TRIALS  # type: ignore[union-attr]


def test_a_grid_of_more_points_than_the_cap_is_refused_before_any_is_listed() -> None:
    config = hparams(
        a={"type": "double", "minval": 0, "maxval": 1, "count": 1000},
        b={"type": "double", "minval": 0, "maxval": 1, "count": 100},
    )
    config["searcher"] = GRID
    assert parse_config(config).searcher.name == "grid"

    config["hyperparameters"]["c"] = {"type": "categorical", "vals": ["x", "y"]}
    assert problems_of(config) == [
        (
            "hyperparameters",
            "the grid has 200,000 points (one trial each); at most 100,000 are allowed: "
            "lower the counts or the number of categorical values",
        )
    ]


def test_global_batch_size_is_bounded() -> None:
    parse_config(hparams(global_batch_size=INT32_MAX))
    assert problems_of(hparams(global_batch_size=INT32_MAX + 1)) == [
        (
            "hyperparameters.global_batch_size",
            f"expected an integer between 1 and {INT32_MAX} (at least resources.slots_per_trial), got {INT32_MAX + 1}",
        )
    ]
    assert problems_of(hparams(global_batch_size=0)) == [
        (
            "hyperparameters.global_batch_size",
            "expected an integer >= 1 (at least resources.slots_per_trial), got 0",
        )
    ]
