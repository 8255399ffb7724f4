"""Lengths at their edges: zero, one record per epoch, a batch of one, a missing unit count, and
the exact messages of conversions that cannot be made."""

from __future__ import annotations

import pytest

from det_airflow.config import Length, length_in_batches
from det_airflow.config._fields import Problems
from det_airflow.config._length import read_length
from det_airflow.errors import ConfigError


def test_zero_batches_are_a_length_bare_or_in_a_mapping() -> None:
    problems = Problems()
    assert read_length(0, "searcher.max_length", problems, bare_int=True) == Length("batches", 0)
    assert read_length({"batches": 0}, "searcher.max_length", problems) == Length("batches", 0)
    assert problems.items == []


def test_a_unit_without_a_count_is_a_problem_and_no_length() -> None:
    problems = Problems()
    assert read_length({"batches": None}, "searcher.max_length", problems) is None
    assert [path for path, _ in problems.items] == ["searcher.max_length.batches"]


def test_one_record_per_epoch_and_a_batch_of_one_convert() -> None:
    assert length_in_batches(Length("epochs", 3), global_batch_size=1, records_per_epoch=1) == 3


def test_epochs_without_records_per_epoch_read_exactly() -> None:
    with pytest.raises(ConfigError) as err:
        length_in_batches(Length("epochs", 1), global_batch_size=32, records_per_epoch=0)
    assert err.value.problems == [
        (
            "records_per_epoch",
            "a length in epochs needs 'records_per_epoch' (the number of records in one epoch) to be "
            "converted to batches; set it, or give the length in batches",
        )
    ]


def test_records_without_a_batch_size_read_exactly() -> None:
    with pytest.raises(ConfigError) as err:
        length_in_batches(Length("records", 10), global_batch_size=None, records_per_epoch=0)
    assert err.value.problems == [
        (
            "hyperparameters.global_batch_size",
            "a length in records needs a 'global_batch_size' hyperparameter to be converted to batches; "
            "set it, or give the length in batches",
        )
    ]
