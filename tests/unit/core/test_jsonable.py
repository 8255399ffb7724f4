"""Metric values become plain JSON: numpy and torch scalars are numbers, non-finite values strings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from det_airflow.core._jsonable import as_float, jsonable, jsonable_metrics
from det_airflow.errors import DetError


def test_numpy_scalars_and_arrays_become_numbers() -> None:
    metrics = jsonable_metrics({"loss": np.float32(0.5), "n": np.int64(3), "hist": np.array([1.0, 2.0])})
    assert metrics == {"loss": 0.5, "n": 3, "hist": [1.0, 2.0]}
    assert type(metrics["loss"]) is float and type(metrics["n"]) is int
    json.dumps(metrics, allow_nan=False)


def test_torch_tensors_become_numbers() -> None:
    torch = pytest.importorskip("torch")
    metrics = jsonable_metrics({"loss": torch.tensor(0.25), "acc": torch.tensor([0.5])})
    assert metrics == {"loss": 0.25, "acc": 0.5}


def test_non_finite_values_are_sent_as_determined_strings() -> None:
    metrics = jsonable_metrics({"a": math.nan, "b": math.inf, "c": -np.inf})
    assert metrics == {"a": "NaN", "b": "Infinity", "c": "-Infinity"}
    assert math.isnan(as_float("NaN")) and as_float("Infinity") == math.inf


def test_nested_values_and_plain_types_are_kept() -> None:
    assert jsonable({"a": [1, True, None, "x"], "b": (1.5,)}) == {"a": [1, True, None, "x"], "b": [1.5]}


def test_objects_that_are_no_numbers_are_refused_by_name() -> None:
    with pytest.raises(DetError, match="metric 'model': a object cannot be reported"):
        jsonable_metrics({"model": object()})
    with pytest.raises(DetError, match="metrics must be a dict"):
        jsonable_metrics([1, 2])  # type: ignore[arg-type]


def test_as_float_ignores_what_is_no_number() -> None:
    assert as_float(True) is None and as_float("high") is None and as_float(None) is None
    assert as_float(3) == 3.0
