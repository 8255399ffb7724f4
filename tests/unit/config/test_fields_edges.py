"""How a bad value is shown, when an unknown field gets a did-you-mean or the list of known fields, and
when a limit is stated: the wording a user reads for each mistake."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config._limits import MAX_TRIALS

from ._configs import minimal, problems_of

# --- values are shown as written in YAML, at most 60 characters ----------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("x" * 58, "'" + "x" * 58 + "'"),  # 60 characters: shown whole
        ("x" * 59, "'" + "x" * 56 + "..."),  # 61 characters: cut to 57 and marked
        (False, "false"),
        (True, "true"),
        ({"a": 1, "b": None}, "{a: 1, b: null}"),
    ],
    ids=["60-chars", "61-chars", "false", "true", "mapping"],
)
def test_a_bad_value_is_shown_as_written_and_cut_at_60_characters(value: Any, shown: str) -> None:
    assert problems_of(minimal(max_restarts=value)) == [
        ("max_restarts", f"expected an integer >= 0, got {shown}")
    ]


def test_a_name_that_is_too_long_is_shown_by_its_start_and_length() -> None:
    assert problems_of(minimal(name="n" * 300)) == [
        ("name", f"expected a string of at most 128 characters, got '{'n' * 20}... (300 characters)'")
    ]


# --- limits no real config reaches are stated only to a value past them --------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (float(MAX_TRIALS), "an integer >= 1"),
        (MAX_TRIALS + 0.5, f"an integer between 1 and {MAX_TRIALS}"),
    ],
    ids=["at-the-cap", "past-the-cap"],
)
def test_the_cap_is_stated_only_to_a_value_past_it(value: float, expected: str) -> None:
    searcher = {"name": "random", "metric": "loss", "max_trials": value}

    assert problems_of(minimal(searcher=searcher)) == [
        ("searcher.max_trials", f"expected {expected}, got {value}")
    ]


# --- unknown fields ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("sto", "unknown field; did you mean 'stop_once'?"),  # three letters: the one field it begins
        ("tim", "unknown field; did you mean 'time_metric'?"),  # begins one field, within two
        ("sm", "unknown field"),  # two letters are too few to guess from
        ("uid", "unknown field; did you mean 'source_checkpoint_uuid'?"),  # the one field containing it
        ("time", "unknown field; did you mean 'time_metric'?"),  # beginning beats containing (max_time)
        ("source", "unknown field"),  # begins two fields: no guess
        ("zzz", "unknown field"),  # close to nothing
    ],
)
def test_an_unknown_searcher_field_gets_a_guess_only_when_one_field_fits(key: str, message: str) -> None:
    searcher = {"name": "single", "metric": "loss", key: 1}

    assert problems_of(minimal(searcher=searcher)) == [(f"searcher.{key}", message)]


def test_a_searcher_name_that_is_not_a_string_gets_no_guess() -> None:
    assert problems_of(minimal(searcher={"name": 5, "metric": "loss"})) == [
        ("searcher.name", "expected one of single, random, grid, adaptive_asha, async_halving, got 5")
    ]


def test_a_section_of_up_to_ten_fields_lists_them_for_an_unknown_one() -> None:
    assert problems_of(minimal(environment={"qqqq": 1})) == [
        (
            "environment.qqqq",
            "unknown field; expected one of image, environment_variables, pod_spec, add_capabilities, "
            "drop_capabilities, force_pull_image, registry_auth, proxy_ports, ports",
        )
    ]


def test_a_section_of_eleven_fields_does_not_list_them() -> None:
    assert problems_of(minimal(resources={"qqqq": 1})) == [("resources.qqqq", "unknown field")]
