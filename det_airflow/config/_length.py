"""Training lengths: ``{batches: N}``, ``{records: N}`` or ``{epochs: N}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, int_kind, is_int, show
from det_airflow.config._limits import INT64_MAX
from det_airflow.config._types import Length, LengthUnit
from det_airflow.errors import ConfigError

UNITS: tuple[LengthUnit, ...] = ("batches", "records", "epochs")


def read_length(value: Any, path: str, problems: Problems, *, bare_int: bool = False) -> Length | None:
    """Reads a Length; ``bare_int`` also accepts a plain integer as batches (``searcher.max_length``)."""
    if bare_int and is_int(value):
        if not 0 <= value <= INT64_MAX:
            problems.add(path, f"expected {int_kind(0, INT64_MAX if value > 0 else None)}, got {show(value)}")
            return None
        return Length("batches", value)
    if not isinstance(value, Mapping):
        alternative = " or an integer (batches)" if bare_int else ""
        problems.add(path, f"expected a length such as {{batches: 937}}{alternative}, got {show(value)}")
        return None
    fields = Fields(value, path, problems, known=UNITS)
    units = [unit for unit in UNITS if unit in value]
    if len(units) != 1:
        # With a misspelled unit alone ({batch: 5}) the did-you-mean above already says it all.
        if units or set(value) <= set(UNITS):
            problems.add(path, f"expected exactly one of batches, records or epochs, got {show(value)}")
        return None
    count = fields.integer(units[0], low=0, cap=INT64_MAX, required=True)
    return None if count is None else Length(units[0], count)


def length_in_batches(length: Length, *, global_batch_size: int | None, records_per_epoch: int) -> int:
    """Converts a Length to batches: records by ``global_batch_size``, epochs via ``records_per_epoch``.

    Raises:
        ConfigError: when the conversion needs a value the experiment does not have.

    Example:
        >>> length_in_batches(Length("records", 100), global_batch_size=32, records_per_epoch=0)
        4
    """
    if length.unit == "batches":
        return length.value
    records = length.value
    if length.unit == "epochs":
        if records_per_epoch <= 0:
            raise ConfigError(
                [
                    (
                        "records_per_epoch",
                        "a length in epochs needs 'records_per_epoch' (the number of records in one "
                        "epoch) to be converted to batches; set it, or give the length in batches",
                    )
                ]
            )
        records = length.value * records_per_epoch
    if not global_batch_size or global_batch_size < 1:
        raise ConfigError(
            [
                (
                    "hyperparameters.global_batch_size",
                    f"a length in {length.unit} needs a 'global_batch_size' hyperparameter to be "
                    "converted to batches; set it, or give the length in batches",
                )
            ]
        )
    return -(-records // global_batch_size)
