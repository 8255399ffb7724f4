"""The searcher section at its edges: the exact problem each mistake gets, lengths given one way,
the other, both or neither, and warm-start fields."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import parse_config

from ._configs import minimal, problems_of

ASHA = {"name": "adaptive_asha", "metric": "loss", "max_trials": 4}


def searcher_problems(**fields: Any) -> list[tuple[str, str]]:
    return problems_of(minimal(searcher=fields))


def test_a_config_without_a_searcher_is_told_what_one_looks_like() -> None:
    assert problems_of({"entrypoint": "python3 train.py"}) == [
        ("searcher", "missing required section; expected a mapping such as {name: single, metric: loss}")
    ]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({**ASHA, "time_metric": "", "max_time": 5}, "searcher.time_metric"),
        (
            {"name": "single", "metric": "loss", "source_checkpoint_uuid": ""},
            "searcher.source_checkpoint_uuid",
        ),
    ],
    ids=["time_metric", "source_checkpoint_uuid"],
)
def test_an_empty_string_is_refused_where_a_name_is_needed(fields: dict[str, Any], path: str) -> None:
    assert searcher_problems(**fields) == [(path, "expected a non-empty string, got ''")]


def test_warm_starting_from_a_trial_and_a_checkpoint_at_once_is_refused() -> None:
    problems = searcher_problems(
        name="single", metric="loss", source_checkpoint_uuid="abc", source_trial_id=3
    )

    assert problems == [
        (
            "searcher.source_checkpoint_uuid",
            "give either 'source_trial_id' or 'source_checkpoint_uuid' to warm-start from, not both",
        )
    ]


def test_a_bracket_rung_count_that_is_a_number_but_not_an_integer_is_told_the_range() -> None:
    assert searcher_problems(**ASHA, max_length=10, bracket_rungs=[1.0, 1.5]) == [
        ("searcher.bracket_rungs[0]", "expected an integer between 1 and 100, got 1.0"),
        ("searcher.bracket_rungs[1]", "expected an integer between 1 and 100, got 1.5"),
    ]


def test_a_sampler_for_the_grid_searcher_names_the_searchers_that_take_one() -> None:
    assert searcher_problems(name="grid", metric="loss", sampler="tpe") == [
        (
            "searcher.sampler",
            "the grid searcher does not sample hyperparameters; 'sampler' applies to "
            "random, adaptive_asha, async_halving",
        )
    ]


# --- lengths: max_length, or time_metric with max_time -------------------------------------------


@pytest.mark.parametrize(
    ("fields", "problems"),
    [
        (
            {"time_metric": "batches"},
            [("searcher.max_time", "required when 'time_metric' is set; expected an integer >= 1")],
        ),
        (
            {"max_time": 5},
            [("searcher.time_metric", "required when 'max_time' is set; expected a string")],
        ),
        (
            {"max_length": 10, "time_metric": "batches"},
            [
                ("searcher.max_time", "required when 'time_metric' is set; expected an integer >= 1"),
                (
                    "searcher.max_length",
                    "give either 'max_length' or 'time_metric' with 'max_time', not both",
                ),
            ],
        ),
        (
            {},
            [
                (
                    "searcher",
                    "the adaptive_asha searcher needs a length: 'max_length' (e.g. {batches: 937}) "
                    "or 'time_metric' with 'max_time'",
                )
            ],
        ),
    ],
    ids=["time_metric-alone", "max_time-alone", "max_length-and-time_metric", "no-length"],
)
def test_an_asha_length_given_by_halves_is_refused_once_for_each_half(
    fields: dict[str, Any], problems: list[tuple[str, str]]
) -> None:
    assert searcher_problems(**ASHA, **fields) == problems


def test_an_asha_length_of_one_batch_is_accepted_and_zero_is_refused() -> None:
    cfg = parse_config(minimal(searcher={**ASHA, "max_length": {"batches": 1}}))
    assert cfg.searcher.max_length is not None
    assert cfg.searcher.max_length.value == 1

    assert searcher_problems(**ASHA, max_length={"batches": 0}) == [
        ("searcher.max_length", "expected a length >= 1 for the adaptive_asha searcher, got {batches: 0}")
    ]
