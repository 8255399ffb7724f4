"""What a report may hold: the error names where an unreportable value sits; numbers of any kind convert."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from det_airflow.core._jsonable import as_float, jsonable, jsonable_metrics
from det_airflow.errors import DetError

from .conftest import Opaque

ADVICE = "cannot be reported; report numbers, strings or lists"


def test_an_unreportable_value_is_named_value_by_default() -> None:
    with pytest.raises(DetError) as raised:
        jsonable(Opaque())
    assert str(raised.value) == f"value: a Opaque {ADVICE}"


@pytest.mark.parametrize(
    "metrics, message",
    [
        ({"m": {"inner": Opaque()}}, f"metric 'm'.inner: a Opaque {ADVICE}"),
        ({"m": [1, 2, Opaque()]}, f"metric 'm'[2]: a Opaque {ADVICE}"),
        ({"m": ({"x": [Opaque()]},)}, f"metric 'm'[0].x[0]: a Opaque {ADVICE}"),
        ({"m": np.array([1, Opaque()], dtype=object)}, f"metric 'm'[1]: a Opaque {ADVICE}"),
    ],
)
def test_the_error_gives_the_path_to_the_unreportable_value(metrics: dict[str, Any], message: str) -> None:
    with pytest.raises(DetError) as raised:
        jsonable_metrics(metrics)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "value, expected",
    [(Decimal("1.5"), 1.5), (Fraction(1, 4), 0.25), (Decimal("Infinity"), "Infinity")],
)
def test_numbers_without_item_convert_through_float(value: Any, expected: Any) -> None:
    assert jsonable(value) == expected


def test_metrics_that_are_no_mapping_are_refused_naming_their_type() -> None:
    with pytest.raises(DetError) as raised:
        jsonable_metrics([("loss", 1.0)])  # type: ignore[arg-type]
    assert str(raised.value) == "metrics must be a dict of name -> value, got list"


@pytest.mark.parametrize("text, number", [("Infinity", math.inf), ("-Infinity", -math.inf)])
def test_as_float_reads_the_infinities_determined_sends(text: str, number: float) -> None:
    assert as_float(text) == number


def test_as_float_reads_nan() -> None:
    assert math.isnan(as_float("NaN"))  # type: ignore[arg-type]
