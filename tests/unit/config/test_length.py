"""length_in_batches: converting records and epochs to batches."""

from __future__ import annotations

import pytest

from det_airflow.config import Length, length_in_batches
from det_airflow.errors import ConfigError


@pytest.mark.parametrize(
    ("length", "batches"),
    [
        (Length("batches", 937), 937),
        (Length("records", 6400), 100),
        (Length("records", 6401), 101),  # a partial batch still has to be trained
        (Length("epochs", 2), 1875),  # 2 * 60000 / 64, rounded up
        (Length("batches", 0), 0),
    ],
)
def test_conversion(length: Length, batches: int) -> None:
    assert length_in_batches(length, global_batch_size=64, records_per_epoch=60000) == batches


def test_batches_need_nothing_else() -> None:
    assert length_in_batches(Length("batches", 5), global_batch_size=None, records_per_epoch=0) == 5


def test_epochs_need_records_per_epoch() -> None:
    with pytest.raises(ConfigError) as info:
        length_in_batches(Length("epochs", 1), global_batch_size=64, records_per_epoch=0)
    [(path, message)] = info.value.problems
    assert path == "records_per_epoch"
    assert "a length in epochs needs 'records_per_epoch'" in message


def test_records_need_a_global_batch_size() -> None:
    with pytest.raises(ConfigError) as info:
        length_in_batches(Length("records", 100), global_batch_size=None, records_per_epoch=0)
    [(path, message)] = info.value.problems
    assert path == "hyperparameters.global_batch_size"
    assert "a length in records needs a 'global_batch_size'" in message


def test_a_length_is_written_as_its_unit() -> None:
    assert Length("epochs", 3).to_dict() == {"epochs": 3}
